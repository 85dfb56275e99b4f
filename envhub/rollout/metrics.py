"""Prometheus metrics of a running rollout (``envhub rollout --metrics-port``,
``envhub.rollout.run(..., metrics_port=)``, ``stream(..., metrics_port=)``).

Every series is named ``envhub_rollout_*`` and lives in the run's own registry (two runs in
one process do not collide). Counters are exposed with Prometheus' ``_total`` suffix,
histograms as ``_bucket``/``_sum``/``_count``:

==========================================  ==========================================
``episodes_started`` / ``_finished``         episodes begun / ended with a trajectory
``episodes_cancelled``                       stopped without one (deadline, closed stream,
                                             dropped by an abort-and-drop weight update)
``episodes_masked{reason,kind}``             masked trajectories: ``env_error`` /
                                             ``model_error`` and the error kind
``episodes_in_flight``                       episodes running now
``queue_depth{queue}``                       ``episodes``: planned, waiting for a concurrency
                                             slot; ``groups``: completed stream groups the
                                             trainer has not taken yet
``reward``                                   reward of each scored episode
``tool_errors{kind}``                        tool calls that became error observations
``env_step_seconds``                         one environment step, as the rollout saw it
``llm_request_seconds{endpoint}``            one HTTP request to a model endpoint
``llm_request_errors{endpoint,kind}``        failed requests (``timeout``, ``connection``,
                                             a policy error code); retries count again
``endpoint_ejections{endpoint}``             endpoints taken out of the pool
``prompt_tokens`` / ``completion_tokens``    per endpoint, as the servers reported usage
  ``{endpoint}``
``completion_tokens_per_second``             over the last 10 s (``rate()`` of the counter
                                             is the same over any window)
``group_staleness``                          streamed groups: ``policy_version`` when the
                                             trainer took the group minus the version the
                                             group started with
==========================================  ==========================================

The policy's numbers come through :class:`envhub.policies.observer.RequestObserver`
(this class is one): policies import no Prometheus, and the rollout's own hooks test
``metrics is None`` once, so a run without metrics pays nothing else.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.exposition import generate_latest

from envhub.errors import InvalidRequest
from envhub.policies.base import Completion, Policy
from envhub.policies.observer import ObservablePolicy
from envhub.trajectory import Trajectory

__all__ = ["RolloutMetrics"]

_STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
# no negative bound: prometheus_client then drops the histogram's _sum (OpenMetrics);
# negative rewards count in le="0.0"
_REWARD_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_STALENESS_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 16, 32)
_TOKEN_WINDOW_S = 10.0


class RolloutMetrics:
    """One run's series, the hooks that feed them, and their HTTP exposition.

    ``port`` (0: a free one) and ``host`` are where :meth:`start` serves ``/metrics``. The
    hooks run in the rollout's event loop; the exposition answers from its own thread
    (prometheus_client's server), reading the series under their locks.
    """

    def __init__(self, port: int = 0, *, host: str = "127.0.0.1") -> None:
        self.host, self.requested_port = host, port
        self.registry = r = CollectorRegistry()
        p = "envhub_rollout_"
        self.started = Counter(f"{p}episodes_started", "Episodes begun", registry=r)
        self.finished = Counter(
            f"{p}episodes_finished",
            "Episodes ended with a trajectory (scored or masked)",
            registry=r,
        )
        self.cancelled = Counter(
            f"{p}episodes_cancelled",
            "Episodes stopped without a trajectory (deadline, closed stream, abort-and-drop)",
            registry=r,
        )
        self.masked = Counter(
            f"{p}episodes_masked",
            "Masked trajectories (infrastructure failures), by stop reason and error kind",
            ["reason", "kind"],
            registry=r,
        )
        self.in_flight = Gauge(f"{p}episodes_in_flight", "Episodes running now", registry=r)
        self.queue_depth = Gauge(
            f"{p}queue_depth",
            "episodes: planned episodes waiting for a concurrency slot; "
            "groups: completed stream groups not yet taken by the trainer",
            ["queue"],
            registry=r,
        )
        self._queued_episodes = self.queue_depth.labels("episodes")
        self.reward = Histogram(
            f"{p}reward", "Reward of each scored episode", buckets=_REWARD_BUCKETS, registry=r
        )
        self.tool_errors = Counter(
            f"{p}tool_errors",
            "Tool calls that became error observations, by kind",
            ["kind"],
            registry=r,
        )
        self.env_step_seconds = Histogram(
            f"{p}env_step_seconds",
            "Time of one environment step, seen from the rollout",
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.llm_seconds = Histogram(
            f"{p}llm_request_seconds",
            "Time of one HTTP request to a model endpoint",
            ["endpoint"],
            buckets=_LLM_BUCKETS,
            registry=r,
        )
        self.llm_errors = Counter(
            f"{p}llm_request_errors",
            "Failed model requests, by endpoint and kind",
            ["endpoint", "kind"],
            registry=r,
        )
        self.ejections = Counter(
            f"{p}endpoint_ejections",
            "Endpoints taken out of the pool after repeated connection failures",
            ["endpoint"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            f"{p}prompt_tokens",
            "Prompt tokens, as the model servers reported",
            ["endpoint"],
            registry=r,
        )
        self.completion_tokens = Counter(
            f"{p}completion_tokens",
            "Completion tokens, as the model servers reported",
            ["endpoint"],
            registry=r,
        )
        self._recent_tokens: deque[tuple[float, int]] = deque()
        Gauge(
            f"{p}completion_tokens_per_second",
            f"Completion tokens per second over the last {_TOKEN_WINDOW_S:g} s",
            registry=r,
        ).set_function(self._tokens_per_second)
        self.staleness = Histogram(
            f"{p}group_staleness",
            "Streamed groups: policy version when the trainer took "
            "the group minus the version it started with",
            buckets=_STALENESS_BUCKETS,
            registry=r,
        )
        self._endpoint_series: dict[str, tuple[Histogram, Counter, Counter]] = {}
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._policy: ObservablePolicy | None = None

    # -- episodes (the rollout's hooks) ---------------------------------------------

    def episodes_queued(self, count: int) -> None:
        """``count`` more episodes are planned and wait for a concurrency slot."""
        self._queued_episodes.inc(count)

    def episode_started(self) -> None:
        self.started.inc()
        self.in_flight.inc()
        self._queued_episodes.dec()

    def episode_ended(self, trajectory: Trajectory | None) -> None:
        """The episode ended with ``trajectory``, or without one (``None``: cancelled)."""
        self.in_flight.dec()
        if trajectory is None:
            self.cancelled.inc()
            return
        self.finished.inc()
        if trajectory.masked:
            kind = trajectory.error.kind if trajectory.error is not None else "unknown"
            self.masked.labels(trajectory.stop_reason or "unknown", kind).inc()
        elif trajectory.reward is not None:
            self.reward.observe(trajectory.reward)
        for kind, count in trajectory.metrics.errors_by_kind.items():
            self.tool_errors.labels(kind).inc(count)

    def env_step(self, seconds: float) -> None:
        self.env_step_seconds.observe(seconds)

    def group_handed_over(self, start_version: int, version: int) -> None:
        """The trainer took a group started at ``start_version`` while at ``version``."""
        self.staleness.observe(version - start_version)

    def watch_queue(self, name: str, depth: Callable[[], float]) -> None:
        """``queue_depth{queue=name}`` reads ``depth()`` at each scrape (from the
        exposition's thread: it must only read)."""
        self.queue_depth.labels(name).set_function(depth)

    # -- model requests (RequestObserver) ---------------------------------------------

    def _endpoint(self, endpoint: str) -> tuple[Histogram, Counter, Counter]:
        series = self._endpoint_series.get(endpoint)
        if series is None:  # labels() takes a lock and a lookup: resolved once per endpoint
            series = self._endpoint_series[endpoint] = (
                self.llm_seconds.labels(endpoint),
                self.prompt_tokens.labels(endpoint),
                self.completion_tokens.labels(endpoint),
            )
        return series

    def request_done(self, endpoint: str, seconds: float, completion: Completion) -> None:
        latency, prompt, generated = self._endpoint(endpoint)
        latency.observe(seconds)
        prompt.inc(completion.prompt_tokens)
        generated.inc(completion.completion_tokens)
        now = time.monotonic()
        self._recent_tokens.append((now, completion.completion_tokens))
        while self._recent_tokens[0][0] < now - _TOKEN_WINDOW_S:
            self._recent_tokens.popleft()

    def request_failed(self, endpoint: str, seconds: float, kind: str) -> None:
        self._endpoint(endpoint)[0].observe(seconds)
        self.llm_errors.labels(endpoint, kind).inc()

    def endpoint_ejected(self, endpoint: str) -> None:
        self.ejections.labels(endpoint).inc()

    def _tokens_per_second(self) -> float:
        since = time.monotonic() - _TOKEN_WINDOW_S
        return sum(n for at, n in list(self._recent_tokens) if at >= since) / _TOKEN_WINDOW_S

    # -- exposition -------------------------------------------------------------------

    def render(self) -> bytes:
        """The exposition text, as ``GET /metrics`` answers it."""
        return generate_latest(self.registry)

    @property
    def port(self) -> int | None:
        """The port serving ``/metrics`` (the chosen one when started on port 0)."""
        return None if self._server is None else self._server.server_port

    def start(self, policy: Policy | None = None) -> None:
        """Serve ``/metrics`` from a background thread (again: nothing), and have
        ``policy`` report its requests here when it can
        (:class:`~envhub.policies.observer.ObservablePolicy`). A port that cannot be
        bound (in use, privileged) raises :class:`~envhub.errors.InvalidRequest`."""
        if self._server is not None:
            return
        try:
            self._server, self._thread = start_http_server(
                self.requested_port, addr=self.host, registry=self.registry
            )
        except OSError as exc:
            raise InvalidRequest(
                f"cannot serve metrics on {self.host}:{self.requested_port}: {exc.strerror or exc}"
                " (pick another --metrics-port)"
            ) from None
        if isinstance(policy, ObservablePolicy):
            policy.observe(self)
            self._policy = policy

    @contextlib.contextmanager
    def serving(self, policy: Policy | None = None) -> Iterator[None]:
        """:meth:`start` for the duration of the block, then :meth:`stop`."""
        self.start(policy)
        try:
            yield
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop serving (the port is free again) and detach from the policy."""
        if self._policy is not None:
            self._policy.observe(None)
            self._policy = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

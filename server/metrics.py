"""Prometheus metrics of one server (``GET /metrics``).

Each app gets its own registry, so several apps in one process (tests, embedding) do not
collide on metric names.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "ServerMetrics", "StepMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(frozen=True)
class StepMetrics:
    steps: Counter
    step_seconds: Histogram
    tool_calls: Counter
    tool_seconds: Histogram


class ServerMetrics:
    """The server's counters, gauges and histograms, labelled by environment."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions_open = Gauge(
            "envhub_sessions_open", "Sessions not yet closed or reaped", ["env"], registry=r
        )
        self.sessions_created = Counter(
            "envhub_sessions_created", "Sessions created", ["env"], registry=r
        )
        self.sessions_closed = Counter(
            "envhub_sessions_closed", "Sessions closed by their client", ["env"], registry=r
        )
        self.sessions_reaped = Counter(
            "envhub_sessions_reaped", "Idle sessions aborted by the TTL reaper", ["env"], registry=r
        )
        self.steps = Counter("envhub_steps", "Steps executed", ["env"], registry=r)
        self.step_seconds = Histogram(
            "envhub_step_seconds", "Server time per step request", ["env"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.tool_calls = Counter("envhub_tool_calls", "Tool calls executed", ["env"], registry=r)
        self.tool_seconds = Histogram(
            "envhub_tool_call_seconds",
            "Time per tool call (a step's tool time shared evenly among its calls)", ["env"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.tool_errors = Counter(
            "envhub_tool_errors", "Tool calls that became is_error observations, by kind",
            ["env", "kind"], registry=r,
        )
        self._step_metrics: dict[str, StepMetrics] = {}
        self.errors = Counter(
            "envhub_http_errors", "Error answers of the API, by error code", ["code"], registry=r
        )

    def step_metrics(self, env: str) -> StepMetrics:
        """The per-step series of one environment, resolved once (``labels()`` costs a lock
        and a dict lookup on every call, and steps are the hot path)."""
        cached = self._step_metrics.get(env)
        if cached is None:
            cached = self._step_metrics[env] = StepMetrics(
                steps=self.steps.labels(env),
                step_seconds=self.step_seconds.labels(env),
                tool_calls=self.tool_calls.labels(env),
                tool_seconds=self.tool_seconds.labels(env),
            )
        return cached

    def render(self) -> bytes:
        return generate_latest(self.registry)

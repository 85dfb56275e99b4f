"""``--metrics-port``: a running rollout's Prometheus series, scraped over HTTP (issue 18).

The exposition lives as long as the run (``run`` returns, the stream closes: the port is
free again), so the run test scrapes from ``on_result`` when the last trajectory arrives
(every episode has ended, the run has not returned yet) and the stream test scrapes
inside its ``async with``. Every count is checked against what the run produced: the
trajectories, the scripted model server's own request counter, the endpoint pool.
"""

from __future__ import annotations

import socket
from collections import Counter, deque
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

import envhub
import envhub.cli.rollout
from envhub.cli._app import app
from envhub.clients.local import LocalEnvironment
from envhub.policies import ReferencePolicy
from envhub.rollout import stream
from envhub.testing import free_port
from envhub.trajectory import Trajectory
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """``GET /metrics``, parsed: (sample name, labels) -> value."""
    reply = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    reply.raise_for_status()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(f"envhub_rollout_{name}", frozenset(labels.items()))]


def labelled(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == f"envhub_rollout_{name}"}


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


async def test_metrics_of_a_run_with_masked_episodes_tool_errors_and_a_dead_endpoint(
    scripted,
) -> None:
    # two malformed calls (tool errors), two HTTP 500s (retried), every 3rd task's sandbox
    # fails at reset (masked env_error), and the second base URL refuses connections
    model = scripted(ScriptConfig(faults=deque(["malformed", "500", "malformed", "500"])))
    dead = f"http://127.0.0.1:{free_port()}/v1"
    policy = openai_policy(model.base_url, dead)
    env = envhub.make("tests.rollout.faulty_envs:FailingResets", fail_every=3)
    port, planned = free_port(), 12
    seen: list[Trajectory] = []
    scraped: list[Samples] = []

    def on_result(trajectory: Trajectory) -> None:
        seen.append(trajectory)
        if len(seen) == planned:  # every episode has ended; the run has not returned
            scraped.append(scrape(port))

    try:
        result = await envhub.rollout.run(
            env, policy, "0:6", group_size=2, concurrency=4, max_env_attempts=1,
            max_masked_fraction=None, max_consecutive_masked=None, metrics_port=port,
            on_result=on_result,
        )  # fmt: skip
    finally:
        await policy.aclose()
    assert port_is_closed(port)  # the exposition stopped with the run
    trajectories = result.trajectories
    assert trajectories is not None and len(trajectories) == planned and len(scraped) == 1
    m = scraped[0]

    assert value(m, "episodes_started_total") == planned
    assert value(m, "episodes_finished_total") == planned
    assert value(m, "episodes_cancelled_total") == 0
    assert value(m, "episodes_in_flight") == 0
    assert value(m, "queue_depth", queue="episodes") == 0

    masked = Counter((t.stop_reason, t.error.kind) for t in trajectories if t.error and t.masked)
    assert masked[("env_error", "sandbox_error")] == 4  # tasks 0 and 3 of 0:6, two samples
    assert {dict(k)["reason"] + "/" + dict(k)["kind"]: v
            for k, v in labelled(m, "episodes_masked_total").items()} == {
        f"{reason}/{kind}": n for (reason, kind), n in masked.items()
    }  # fmt: skip

    rewards = [t.reward for t in trajectories if not t.masked and t.reward is not None]
    assert value(m, "reward_count") == len(rewards) == planned - sum(masked.values())
    assert value(m, "reward_sum") == pytest.approx(sum(rewards))

    tool_errors = Counter[str]()
    for t in trajectories:
        tool_errors.update(t.metrics.errors_by_kind)
    assert sum(tool_errors.values()) >= 1  # the malformed calls landed in scored episodes
    assert {dict(k)["kind"]: v for k, v in labelled(m, "tool_errors_total").items()} == dict(
        tool_errors
    )
    steps = sum(len(t.turns) for t in trajectories)  # each model turn was one env step
    assert value(m, "env_step_seconds_count") == steps > 0

    live, refused = model.base_url, dead.rstrip("/")
    dead_endpoint = next(e for e in policy.pool.endpoints if e.url == refused)
    assert value(m, "llm_request_seconds_count", endpoint=live) == model.stats.requests
    assert value(m, "llm_request_errors_total", endpoint=live, kind="policy_transient") == 2
    assert dead_endpoint.requests >= 3
    assert value(m, "llm_request_seconds_count", endpoint=refused) == dead_endpoint.requests
    assert {dict(k)["endpoint"] + "/" + dict(k)["kind"]: v
            for k, v in labelled(m, "llm_request_errors_total").items()} == {
        f"{live}/policy_transient": 2, f"{refused}/connection": dead_endpoint.requests
    }  # fmt: skip
    assert labelled(m, "endpoint_ejections_total") == {frozenset({("endpoint", refused)}): 1}

    completion_tokens = sum(t.usage.completion_tokens for t in trajectories)
    prompt_tokens = sum(t.usage.prompt_tokens for t in trajectories)
    assert value(m, "completion_tokens_total", endpoint=live) == completion_tokens > 0
    assert value(m, "prompt_tokens_total", endpoint=live) == prompt_tokens
    assert value(m, "completion_tokens_per_second") > 0
    assert policy.observer is None  # detached when the run ended


async def test_stream_metrics_count_the_staleness_of_every_group_handed_over(
    calc: LocalEnvironment,
) -> None:
    task_ids = (await calc.task_ids(None))[:5]
    port = free_port()
    staleness: list[int] = []
    async with stream(
        calc, ReferencePolicy(), task_ids, group_size=2, batch_size=1, concurrency=4,
        overprovision=2, epochs=1, metrics_port=port,
    ) as rollouts:  # fmt: skip
        while batch := await rollouts.next_batch():
            staleness += [rollouts.policy_version - g.start_version for g in batch]
            rollouts.policy_version += 1  # a weight update after every batch
        m = scrape(port)
    assert port_is_closed(port)
    assert len(staleness) == len(task_ids) and max(staleness) >= 1  # overprovisioned groups
    assert value(m, "group_staleness_count") == len(task_ids)
    assert value(m, "group_staleness_sum") == sum(staleness)
    for bound in ("0.0", "1.0"):
        assert value(m, "group_staleness_bucket", le=bound) == sum(
            s <= float(bound) for s in staleness
        )
    episodes = 2 * len(task_ids)
    assert value(m, "episodes_started_total") == value(m, "episodes_finished_total") == episodes
    assert value(m, "reward_count") == episodes
    assert value(m, "queue_depth", queue="groups") <= 1  # only the end-of-stream marker left
    assert value(m, "queue_depth", queue="episodes") == 0


def test_the_cli_flag_serves_while_running_and_names_a_port_it_cannot_bind(
    tmp_path: Path,
) -> None:
    port = free_port()
    args = ["rollout", "calc", "--policy", "reference", "--tasks", "0:2"]
    done = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "a.jsonl"), "--metrics-port",
                                    str(port)])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert port_is_closed(port)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        refused = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "b.jsonl"),
                                           "--metrics-port", str(taken)])  # fmt: skip
    assert refused.exit_code == 2
    assert f"cannot serve metrics on 127.0.0.1:{taken}" in " ".join(refused.output.split())

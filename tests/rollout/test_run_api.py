"""``envhub.rollout.run`` / ``run_sync``: ``envhub rollout`` as one Python call (issue 13)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import envhub
from envhub.errors import InvalidRequest, RolloutFailed
from envhub.policies import ReferencePolicy
from envhub.trajectory import read_records
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ThreadedUvicorn


async def test_run_in_memory_returns_summary_and_trajectories() -> None:
    env = envhub.make("calc")
    result = await envhub.rollout.run(env, ReferencePolicy(), "0:3", group_size=2, concurrency=4)
    assert result.output is None and result.trajectories is not None
    assert sorted((t.task_id, t.sample_index) for t in result.trajectories) == [
        (f"calc-0-{i:05d}", s) for i in (4, 9, 14) for s in range(2)
    ]
    assert result.summary.episodes == 6 and result.summary.mean_reward == 1.0
    assert result.summary.planned == 6 and result.summary.missing == 0
    assert result.summary.stopped is None
    assert result.trajectories[0].env.version == env.version


async def test_run_to_a_file_writes_it_and_its_summary(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    result = await envhub.rollout.run(
        envhub.make("calc"), ReferencePolicy(), ["calc-0-00001", "calc-0-00002"], output=out
    )
    assert result.trajectories is None and result.output == out
    assert [r["task_id"] for r in read_records(out)] == ["calc-0-00001", "calc-0-00002"]
    assert result.summary.episodes == 2
    with pytest.raises(InvalidRequest, match="--resume"):
        await envhub.rollout.run(envhub.make("calc"), ReferencePolicy(), "0:1", output=out)


def test_run_sync_blocks_and_can_be_called_again_with_the_same_objects() -> None:
    env = envhub.make("calc")
    policy = ReferencePolicy()
    first = envhub.rollout.run_sync(env, policy, "0:2")
    second = envhub.rollout.run_sync(env, policy, "train[0:2]", group_size=2)
    assert first.summary.episodes == 2 and second.summary.episodes == 4
    assert second.summary.mean_reward == 1.0


async def test_run_sync_works_under_a_running_event_loop() -> None:
    """As in a notebook: the blocking call does not nest or need the caller's loop."""
    result = envhub.rollout.run_sync(envhub.make("calc"), ReferencePolicy(), "0:2")
    assert result.summary.episodes == 2


async def test_time_limit_stops_the_run_and_resume_finishes_it(scripted, tmp_path: Path) -> None:
    model = scripted(ScriptConfig(latency_s=0.2))  # 3 turns: at least 0.6 s an episode
    env = envhub.make("calc")
    out = tmp_path / "limited.jsonl"
    policy = openai_policy(model.base_url)
    try:
        result = await envhub.rollout.run(
            env, policy, "0:40", concurrency=2, output=out, time_limit_s=1.0
        )
        summary = result.summary
        assert summary.stopped == "deadline" and summary.planned == 40
        assert summary.missing > 0 and summary.episodes == 40 - summary.missing
        written = list(read_records(out))
        assert len(written) == summary.episodes and not any(r["masked"] for r in written)
        # the episodes cut by the deadline were cancelled, not recorded: resume runs them
        result = await envhub.rollout.run(env, policy, "0:40", concurrency=8, output=out,
                                          resume=True)  # fmt: skip
    finally:
        await policy.aclose()
    assert result.summary.missing == 0 and result.summary.episodes == 40
    assert len({(r["task_id"], r["sample_index"]) for r in read_records(out)}) == 40


async def test_the_circuit_breaker_stops_a_run_against_a_broken_environment() -> None:
    env = envhub.make("tests.rollout.faulty_envs:FailingResets", fail_every=1)
    with pytest.raises(RolloutFailed, match="5 episodes in a row were masked") as caught:
        await envhub.rollout.run(env, ReferencePolicy(), "0:200", concurrency=2,
                                 max_env_attempts=1, max_consecutive_masked=5)  # fmt: skip
    result = caught.value.result
    assert result.summary.stopped == "circuit_breaker"
    assert result.trajectories is not None and 5 <= len(result.trajectories) <= 5 + 2
    assert result.summary.missing == 200 - len(result.trajectories)
    assert "sandbox_error" in str(caught.value)


async def test_a_breaker_that_opens_on_the_last_episode_counts_no_episodes_not_run() -> None:
    """Every episode ran and the last one opened the breaker: the error says how many are
    masked, not that "0 of 5 episodes were not run"."""
    env = envhub.make("tests.rollout.faulty_envs:FailingResets", fail_every=1)
    with pytest.raises(RolloutFailed) as caught:
        await envhub.rollout.run(env, ReferencePolicy(), "0:5", concurrency=1,
                                 max_env_attempts=1, max_consecutive_masked=5)  # fmt: skip
    assert caught.value.result.summary.missing == 0
    assert "looks down, and 5 of its 5 episodes are masked" in str(caught.value)
    assert "were not run" not in str(caught.value)


async def test_too_many_masked_episodes_raise_unless_allowed() -> None:
    env = envhub.make("tests.rollout.faulty_envs:FailingResets", fail_every=2)
    with pytest.raises(RolloutFailed, match=r"2 of 4 episodes \(50%\) are masked"):
        await envhub.rollout.run(env, ReferencePolicy(), "0:4", max_env_attempts=1)
    result = await envhub.rollout.run(
        env, ReferencePolicy(), "0:4", max_env_attempts=1, max_masked_fraction=None
    )
    assert result.summary.masked == 2 and result.summary.scored == 2


server_app = pytest.importorskip("envhub.server", reason="the server extra is not installed")


async def test_run_with_a_remote_client(scripted) -> None:
    model = scripted(ScriptConfig())
    with ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on") as env_server:
        policy = openai_policy(model.base_url)
        async with envhub.RemoteEnvironment(env_server.url, "calc") as remote:
            try:
                result = await envhub.rollout.run(
                    remote, policy, "test[0:3]", group_size=2, max_turns=2
                )
            finally:
                await policy.aclose()
    assert result.trajectories is not None and len(result.trajectories) == 6
    assert all(t.stop_reason == "max_turns" and not t.masked for t in result.trajectories)
    assert result.trajectories[0].env.version not in ("", "unknown")


def test_envhub_rollout_is_reachable_from_a_bare_import() -> None:
    import subprocess
    import sys

    code = "import envhub; print(envhub.rollout.run.__name__, envhub.rollout.run_sync.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert done.stdout.split() == ["run", "run_sync"]
    assert asyncio.iscoroutinefunction(envhub.rollout.run)

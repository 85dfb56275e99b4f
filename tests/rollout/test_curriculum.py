"""Curricula (issue 33): a task set of easy, medium and impossible tasks
(:mod:`tests.rollout.curriculum_env`) played by the reference policy with a 10% chance
of a wrong action per turn, so each task has a known pass rate and every sample's
outcome is fixed by its task and index. With one episode in flight a run is
deterministic, so the adaptive sampler's counts (seed 0) are asserted; a run
killed with SIGKILL and resumed must draw exactly what an uninterrupted run draws."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

import envhub
from envhub.clients.local import LocalEnvironment
from envhub.errors import InvalidRequest
from envhub.policies import ReferencePolicy
from envhub.rollout import run, run_sync, stream
from envhub.rollout.curriculum import sampler_path
from envhub.rollout.sampling import AdaptiveSampler, UniformRewardGate
from envhub.trajectory import Trajectory, read_records
from envhub.view.app import create_app
from envhub.view.catalog import Catalog
from tests.rollout.curriculum_env import ENV_ID
from tests.rollout.scripted_server import ThreadedUvicorn

ROOT = Path(__file__).resolve().parents[2]
WRONG_P = 0.1


@pytest.fixture(scope="module")
def env() -> LocalEnvironment:
    return envhub.make(ENV_ID, per_kind=2)


def policy() -> ReferencePolicy:
    return ReferencePolicy(wrong_action_p=WRONG_P)


def kinds(group_ids: list[str]) -> Counter[str]:
    return Counter(gid.split("-")[0] for gid in group_ids)


def group_ids(trajectories: list[Trajectory]) -> list[str]:
    return list(dict.fromkeys(t.group_id for t in trajectories))


async def test_adaptive_sampler_shifts_draws_towards_tasks_of_moderate_success(
    env: LocalEnvironment,
) -> None:
    uniform = await run(env, policy(), group_size=4, concurrency=1, sampler="uniform", groups=60)
    assert kinds(group_ids(uniform.trajectories or [])) == {
        "easy": 20, "medium": 20, "impossible": 20,
    }  # fmt: skip
    adaptive = await run(env, policy(), group_size=4, concurrency=1, sampler="adaptive",
                         groups=60, sampler_seed=0)  # fmt: skip
    drawn = kinds(group_ids(adaptive.trajectories or []))
    assert sum(drawn.values()) == 60 and adaptive.summary.groups_kept == 60
    assert drawn["medium"] > 30 and drawn["medium"] > 2 * max(drawn["easy"], drawn["impossible"])
    rates = adaptive.summary.pass_rate_by_task
    assert rates["impossible-0"] == rates["impossible-1"] == 0.0
    assert all(0.3 <= rates[f"medium-{i}"] <= 0.8 for i in range(2)), rates
    assert list(adaptive.summary.pass_at_k) == ["pass@1", "pass@2", "pass@4"]


async def test_uniform_is_the_plain_plan_and_the_default_writes_no_state(
    env: LocalEnvironment, tmp_path: Path
) -> None:
    plain = await run(env, policy(), group_size=3, concurrency=1, output=tmp_path / "a.jsonl")
    sampled = await run(env, policy(), group_size=3, concurrency=1, sampler="uniform",
                        output=tmp_path / "b.jsonl")  # fmt: skip

    def episodes(path: Path) -> list[tuple[Any, ...]]:
        return [(r["task_id"], r["sample_index"], r["group_id"], r["reward"])
                for r in read_records(path)]  # fmt: skip

    assert episodes(tmp_path / "a.jsonl") == episodes(tmp_path / "b.jsonl")
    assert len(episodes(tmp_path / "a.jsonl")) == 18
    assert not sampler_path(tmp_path / "a.jsonl").exists()
    assert sampler_path(tmp_path / "b.jsonl").exists()
    assert plain.summary.groups_kept is None and sampled.summary.groups_kept == 6
    assert plain.summary.pass_at_k == sampled.summary.pass_at_k
    assert plain.summary.pass_rate_by_task == sampled.summary.pass_rate_by_task
    with pytest.raises(InvalidRequest, match="sampled run"):  # a sampled file needs --sampler
        await run(env, policy(), group_size=3, output=tmp_path / "b.jsonl", resume=True)
    with pytest.raises(InvalidRequest, match="not 'adaptive'"):
        await run(env, policy(), group_size=3, output=tmp_path / "b.jsonl", resume=True,
                  sampler="adaptive")  # fmt: skip
    for damage, error in [("{not json", "unreadable"), ('{"version": 1}', "malformed")]:
        sampler_path(tmp_path / "b.jsonl").write_text(damage)
        with pytest.raises(InvalidRequest, match=error):
            await run(env, policy(), group_size=3, output=tmp_path / "b.jsonl", resume=True,
                      sampler="uniform")  # fmt: skip


async def test_groups_whose_rewards_all_agree_are_dropped_and_replaced(
    env: LocalEnvironment, tmp_path: Path
) -> None:
    output = tmp_path / "run.jsonl"
    result = await run(env, policy(), group_size=4, concurrency=4, sampler="adaptive",
                       groups=8, gates=[UniformRewardGate()], output=output)  # fmt: skip
    state = json.loads(sampler_path(output).read_text())
    rewards: dict[str, set[float]] = {}
    for record in read_records(output):  # every group drawn is in the file, dropped ones too
        rewards.setdefault(record["group_id"], set()).add(record["reward"])
    assert set(rewards) == {f"{t}#{r}" for t, n in state["rounds"].items() for r in range(n)}
    dropped = [gid for gid, agree in rewards.items() if len(agree) == 1]
    assert state["kept"] == result.summary.groups_kept == len(rewards) - len(dropped) == 8
    assert state["dropped"] == result.summary.groups_dropped == len(dropped) > 0
    assert state["pending"] == []
    assert result.summary.stopped is None and result.summary.missing == 0
    catalog = Catalog([output], tmp_path / "cache")  # envhub view shows the counts
    try:
        with ThreadedUvicorn(create_app(catalog)) as viewer:
            async with httpx.AsyncClient() as client:
                page = (await client.get(f"{viewer.url}/runs/0")).text
    finally:
        catalog.close()
    assert f'<div class="v" id="groups">8 / {len(dropped)}</div>' in page
    assert '<table id="tasks-table">' in page  # and the pass rate of each task

    never = await run(env, policy(), "impossible-0,impossible-1", group_size=2, concurrency=1,
                      groups=2, gates=[UniformRewardGate()])  # fmt: skip
    assert never.summary.groups_kept == 0 and never.summary.groups_dropped == 8
    assert never.summary.stopped == "max_draws"


async def test_the_stream_drops_uniform_groups_and_carries_its_state(
    env: LocalEnvironment,
) -> None:
    task_ids = list(await env.task_ids())
    async with stream(env, policy(), task_ids, group_size=4, batch_size=3, max_staleness=0,
                      sampler="adaptive", gates=[UniformRewardGate()]) as rollouts:  # fmt: skip
        batches = [await rollouts.next_batch(timeout=30) for _ in range(3)]
        state = json.loads(json.dumps(rollouts.state_dict()))
        dropped = rollouts.groups_dropped
    groups = [g for batch in batches for g in batch]
    assert len(groups) == 9 and dropped > 0
    assert all(len({t.reward for t in g.trajectories}) > 1 for g in groups)
    assert not any(g.task_id.startswith("impossible") for g in groups)

    resumed = AdaptiveSampler(task_ids)
    again = stream(env, policy(), task_ids, group_size=4, sampler=resumed)
    again.load_state_dict(state)  # before it starts
    async with again:
        assert resumed.samples == state["sampler"]["samples"] and sum(resumed.samples.values())
        first = await again.next_batch(1, timeout=30)
    task_id = first[0].task_id
    assert first[0].round == state["rounds"].get(task_id, 0)  # its rounds go on

    async with stream(env, policy(), task_ids, group_size=1, epochs=2) as plain:
        order = [g.group_id async for g in plain]
    assert sorted(order) == sorted(f"{t}#{r}" for r in range(2) for t in task_ids)


def test_a_killed_run_resumes_its_curriculum_exactly(env: LocalEnvironment, tmp_path: Path) -> None:
    """SIGKILL in the middle, then ``--resume``: the draws, their outcomes and the
    sampler's counts equal those of a run that was never interrupted."""
    output = tmp_path / "run.jsonl"
    common = ["--policy", "reference", "--wrong-action-p", str(WRONG_P), "--group-size", "4",
              "--concurrency", "1", "--sampler", "adaptive", "--groups", "16",
              "--drop-uniform-groups", "-o", str(output)]  # fmt: skip
    cli = [sys.executable, "-m", "envhub.cli", "rollout", ENV_ID]
    child = subprocess.Popen([*cli, "--env-arg", "delay_s=0.02", *common], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    state = sampler_path(output)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if state.exists() and sum(json.loads(state.read_text())["rounds"].values()) >= 6:
                break
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    killed_at = json.loads(state.read_text())
    resumed = subprocess.run([*cli, *common, "--resume"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr

    reference = tmp_path / "reference.jsonl"
    run_sync(env, policy(), group_size=4, concurrency=1, sampler="adaptive", groups=16,
             gates=[UniformRewardGate()], output=reference)  # fmt: skip
    mine, theirs = json.loads(state.read_text()), json.loads(sampler_path(reference).read_text())
    assert 6 <= sum(killed_at["rounds"].values()) < sum(mine["rounds"].values())
    assert killed_at["kept"] < mine["kept"] == 16 and mine["pending"] == []
    assert mine == theirs  # the same draws, outcomes and sampler state

    def outcomes(path: Path) -> list[tuple[Any, ...]]:
        return sorted((r["group_id"], r["sample_index"], r["reward"]) for r in read_records(path))

    assert outcomes(output) == outcomes(reference)  # nothing lost, nothing twice
    summary = json.loads(Path(f"{output}.summary.json").read_text())
    assert summary["groups_kept"] == 16 and summary["missing"] == 0

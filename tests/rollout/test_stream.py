"""Streaming groups to a trainer: staleness gating, version recording, back-pressure."""

from __future__ import annotations

import asyncio

import pytest

from envhub.clients.local import LocalEnvironment
from envhub.errors import InvalidRequest, StreamTimeout
from envhub.policies import OpenAIPolicy, ReferencePolicy
from envhub.rollout import stream
from tests.rollout.helpers import FAST_RETRY
from tests.rollout.scripted_server import ScriptConfig


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


async def test_staleness_gates_new_groups_until_the_version_moves(calc: LocalEnvironment) -> None:
    task_ids = (await calc.task_ids(None))[:20]
    async with stream(
        calc, ReferencePolicy(), task_ids, group_size=2, batch_size=2, max_staleness=0
    ) as rollouts:
        first = await rollouts.next_batch()
        await settle()
        assert len(first) == 2 and rollouts.groups_started == 2  # nothing beyond one batch
        assert all(len(g.trajectories) == 2 for g in first)
        assert {t.turns[0].policy_version for g in first for t in g.trajectories} == {0}
        rollouts.policy_version = 1
        second = await rollouts.next_batch()
        await settle()
        assert rollouts.groups_started == 4
        assert {t.turns[0].policy_version for g in second for t in g.trajectories} == {1}
        assert all(g.start_version == 1 for g in second)
        assert {g.group_id for g in first}.isdisjoint(g.group_id for g in second)


async def test_staleness_allowance_and_overprovisioning(calc: LocalEnvironment) -> None:
    task_ids = (await calc.task_ids(None))[:20]
    async with stream(
        calc,
        ReferencePolicy(),
        task_ids,
        group_size=1,
        batch_size=3,
        max_staleness=1,
        overprovision=2,
    ) as rollouts:
        batch = await rollouts.next_batch()
        await settle()
        assert len(batch) == 3
        assert rollouts.groups_started == 2 * 3 + 2  # (staleness + 1) batches + over-provisioned


async def test_slow_groups_do_not_hold_back_a_batch(scripted, calc: LocalEnvironment) -> None:
    """Over-provisioned groups: the batch takes the first groups to finish."""
    server = scripted(ScriptConfig(latency_s=0.01, tail_latency_s=1.5, tail_fraction=0.0))
    policy = OpenAIPolicy("scripted", [server.base_url], retry=FAST_RETRY)
    task_ids = (await calc.task_ids(None))[:8]
    try:
        async with stream(
            calc,
            policy,
            task_ids,
            group_size=1,
            batch_size=2,
            max_staleness=0,
            overprovision=2,
            epochs=1,
        ) as rollouts:
            server.config.faults.extend(["hang"])  # the first request of the first group hangs
            server.config.hang_s = 1.5
            batch = await rollouts.next_batch()
            assert len(batch) == 2
            assert task_ids[0] not in {g.task_id for g in batch}  # the hung group is still running
    finally:
        await policy.aclose()


async def test_back_pressure_bounds_work_ahead_of_the_consumer(calc: LocalEnvironment) -> None:
    task_ids = (await calc.task_ids(None))[:50]
    async with stream(
        calc, ReferencePolicy(), task_ids, group_size=2, batch_size=2, concurrency=4, queue_size=2
    ) as rollouts:
        await rollouts.next_batch(1)
        await settle()
        # queue (2) + groups blocked on a full queue (4 // 2 = 2) + the one handed over
        assert rollouts.groups_started <= 5
        started = rollouts.groups_started
        await settle()
        assert rollouts.groups_started == started


async def test_finite_stream_ends(calc: LocalEnvironment) -> None:
    task_ids = (await calc.task_ids(None))[:3]
    async with stream(calc, ReferencePolicy(), task_ids, group_size=2, epochs=2) as rollouts:
        groups = [g async for g in rollouts]
    assert sorted(g.group_id for g in groups) == sorted(
        f"{t}#{r}" for t in task_ids for r in range(2)
    )
    assert all(t.reward == 1.0 for g in groups for t in g.trajectories)


async def test_a_trainer_that_skips_updates_never_stalls_the_stream(
    calc: LocalEnvironment,
) -> None:
    """A scripted trainer that updates only on every third batch (the others had equal
    rewards): asking for the next batch ends its step, so the stream keeps going, and no
    group is consumed more than ``max_staleness`` versions after the version it started at."""
    task_ids = (await calc.task_ids(None))[:20]
    async with stream(
        calc, ReferencePolicy(), task_ids, group_size=2, batch_size=2, max_staleness=1
    ) as rollouts:
        for step in range(8):
            batch = await rollouts.next_batch(timeout=30)
            assert len(batch) == 2
            assert all(rollouts.policy_version - g.start_version <= 1 for g in batch)
            if step % 3 == 2:
                rollouts.policy_version += 1
        await settle()
        # 7 finished steps (the eighth is still training) + (staleness + 1) batches
        assert rollouts.groups_started == 7 * 2 + 2 * 2
        with pytest.raises(InvalidRequest, match="staleness bound"):
            await rollouts.next_batch(5)


async def test_next_batch_timeout_keeps_the_groups_it_collected(
    scripted, calc: LocalEnvironment
) -> None:
    server = scripted(ScriptConfig(latency_s=0.01))
    policy = OpenAIPolicy("scripted", [server.base_url], retry=FAST_RETRY)
    task_ids = (await calc.task_ids(None))[:4]
    try:
        async with stream(
            calc, policy, task_ids, group_size=1, batch_size=2, max_staleness=0, epochs=1
        ) as rollouts:
            server.config.faults.extend(["hang"])  # the first group hangs past the timeout
            server.config.hang_s = 1.0
            with pytest.raises(StreamTimeout, match=r"of 2 groups completed within 0\.2s"):
                await rollouts.next_batch(timeout=0.2)
            first = await rollouts.next_batch(timeout=30)
            rollouts.policy_version += 1
            rest = [g async for g in rollouts]
    finally:
        await policy.aclose()
    assert len(first) == 2
    assert sorted(g.task_id for g in first + rest) == sorted(task_ids)  # nothing lost

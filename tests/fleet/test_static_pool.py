"""A static pool of ``envhub serve`` processes (:class:`PooledEnvironment` over a list of
URLs), no Ray: a rollout survives a replica's SIGKILL with every episode written once and
scored, sessions spread evenly over the replicas (counting other clients' sessions too),
and a pool with nothing behind it fails with a clear error instead of hanging."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.clients.remote import RemoteEnvironment
from envhub.errors import FleetError, RolloutFailed
from envhub.fleet import PooledEnvironment
from envhub.policies.reference import ReferencePolicy
from envhub.protocol import EnvironmentClient
from envhub.rollout import run
from envhub.rollout.summary import ReplicaCounts
from envhub.testing import free_port
from envhub.trajectory import read_records
from tests.fleet.holding import HoldAtSecondTurn
from tests.fleet.serve_processes import ServeProcess, serve_processes

pytest.importorskip("envhub.server", reason="the server extra is not installed")

TASKS = [f"calc-0-{i:05d}" for i in range(100)]
GROUP = 2  # samples per task: 200 episodes
PLANNED = {(task_id, s) for task_id in TASKS for s in range(GROUP)}


@pytest.fixture
async def local_calc() -> AsyncIterator[EnvironmentClient]:
    """An in-process calc: where the reference policy reads the tasks' gold actions."""
    env = envhub.make("calc")
    yield env
    await env.aclose()


@pytest.fixture
def two_servers() -> Iterator[list[ServeProcess]]:
    with serve_processes(2) as servers:
        yield servers


@pytest.fixture(scope="module")
def four_servers() -> Iterator[list[ServeProcess]]:
    with serve_processes(4, args=["--max-sessions", "2000"]) as servers:
        yield servers


def _pairs(records: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(r["task_id"], r["sample_index"]) for r in records]


@pytest.mark.parametrize("transport", ["ws", "http"])
async def test_a_replica_killed_mid_rollout_loses_no_episode_and_counts_none_twice(
    two_servers: list[ServeProcess], local_calc: EnvironmentClient, tmp_path: Path,
    transport: str,
) -> None:
    survivor, victim = two_servers
    concurrency = 16
    policy = HoldAtSecondTurn(concurrency)
    pool = PooledEnvironment([s.url for s in two_servers], "calc", transport=transport,  # type: ignore[arg-type]
                             seed=7, health_interval_s=0.2, wait_for_replica_s=30)

    async def kill_the_victim_with_sessions_on_it() -> dict[str, Any]:
        await policy.all_held.wait()
        states = {state.replica_id: state for state in await pool.replica_states()}
        assert states[victim.url].open_sessions > 0, states  # else the kill proves nothing
        assert states[survivor.url].open_sessions > 0, states
        victim.kill()
        policy.released.set()
        return {"open": states[victim.url].open_sessions, "opened": states[victim.url].opened}

    output = tmp_path / "calc.jsonl"
    try:
        killer = asyncio.ensure_future(kill_the_victim_with_sessions_on_it())
        result = await run(pool, policy, TASKS, group_size=GROUP,
                           concurrency=concurrency, output=output, on_result=policy.arm_after(40),
                           tasks_from=local_calc)
        at_kill = await killer
        after = {state.replica_id: state for state in await pool.replica_states()}
    finally:
        await pool.aclose()

    records = list(read_records(output))
    assert len(records) == len(PLANNED)  # one line per episode: none lost, none twice
    assert set(_pairs(records)) == PLANNED
    assert len({r["trajectory_id"] for r in records}) == len(PLANNED)
    assert not [r for r in records if r["masked"]]
    assert {r["reward"] for r in records} == {1.0}

    # exactly the sessions that were on the victim when it died ran again, on the survivor
    retried = [r for r in records if r["metrics"]["retried_errors"]]
    assert len(retried) == at_kill["open"]
    assert all(r["metrics"]["retried_errors"] == {"replica_lost": 1} for r in retried)
    assert all(r["metrics"]["episode_attempts"] == 2 for r in retried)
    assert {r["served_by"] for r in retried} == {survivor.url}

    # no session went to the dead replica after the kill; the summary counts who ran what
    assert after[victim.url].healthy is False and after[survivor.url].healthy is True
    assert after[victim.url].opened == at_kill["opened"]
    assert after[victim.url].lost == at_kill["open"]
    on_victim = at_kill["opened"] - at_kill["open"]  # finished there before the kill
    assert Counter(r["served_by"] for r in records) == {
        victim.url: on_victim, survivor.url: len(PLANNED) - on_victim
    }
    summary = result.summary
    assert summary.by_replica == {
        victim.url: ReplicaCounts(episodes=on_victim, masked=0),
        survivor.url: ReplicaCounts(episodes=len(PLANNED) - on_victim, masked=0),
    }
    assert summary.retried == {"replica_lost": at_kill["open"]}
    assert (summary.episodes, summary.masked, summary.mean_reward) == (len(PLANNED), 0, 1.0)


async def _spread(servers: list[ServeProcess]) -> list[int]:
    """Open sessions per server, as each server's ``/health`` counts them."""
    return [server.health().sessions for server in servers]


async def test_a_thousand_sessions_spread_evenly_over_four_replicas(
    four_servers: list[ServeProcess],
) -> None:
    pool = PooledEnvironment([s.url for s in four_servers], "calc", transport="http", seed=3)
    sessions: list[Any] = []
    try:
        sessions = list(await asyncio.gather(
            *(pool.open(f"calc-0-{i:05d}") for i in range(1000))
        ))
        counts = await _spread(four_servers)
        assert sum(counts) == 1000
        assert max(counts) / min(counts) <= 1.3, counts
        # each session is pinned where the server says it is
        assert Counter(s.served_by for s in sessions) == {
            server.url: n for server, n in zip(four_servers, counts, strict=True)
        }
    finally:
        await asyncio.gather(*(s.abort() for s in sessions))
        await pool.aclose()
    assert await _spread(four_servers) == [0, 0, 0, 0]


async def test_the_balancer_counts_the_sessions_of_other_clients(
    four_servers: list[ServeProcess],
) -> None:
    """300 sessions another client holds on one replica: the pool fills the other three
    first, so the totals even out (a blind random spread would leave that replica at
    about 300 + 225 against 225 elsewhere)."""
    busy = four_servers[0]
    other = RemoteEnvironment(busy.url, "calc", transport="http")
    pool = PooledEnvironment([s.url for s in four_servers], "calc", transport="http", seed=5)
    theirs: list[Any] = []
    ours: list[Any] = []
    try:
        theirs = list(await asyncio.gather(
            *(other.open(f"calc-0-{i:05d}") for i in range(300))
        ))
        ours = list(await asyncio.gather(*(pool.open(f"calc-0-{i:05d}") for i in range(900))))
        counts = await _spread(four_servers)
        assert sum(counts) == 1200
        assert max(counts) / min(counts) <= 1.3, counts
    finally:
        await asyncio.gather(*(s.abort() for s in [*theirs, *ours]))
        await pool.aclose()
        await other.aclose()


async def test_a_pool_with_nothing_listening_fails_fast_with_a_fleet_error(
    local_calc: EnvironmentClient,
) -> None:
    nowhere = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    with pytest.raises(ValueError, match="at least one server URL"):
        PooledEnvironment([], "calc")
    pool = PooledEnvironment(nowhere, "calc", wait_for_replica_s=1.0, health_interval_s=0.1,
                             health_timeout_s=1.0)
    try:
        # the outer limit only turns a hang into a failure; the pool gives up after ~1 s
        with pytest.raises(FleetError, match="no healthy replica of calc"):
            await asyncio.wait_for(pool.open("calc-0-00000"), 60)
        with pytest.raises(FleetError, match="no healthy replica of calc"):
            await asyncio.wait_for(
                run(pool, ReferencePolicy(), "0:4", tasks_from=local_calc), 60
            )
    finally:
        await pool.aclose()


async def test_a_rollout_whose_every_replica_died_stops_with_its_episodes_accounted_for(
    two_servers: list[ServeProcess], local_calc: EnvironmentClient, tmp_path: Path,
) -> None:
    """Both servers SIGKILLed mid-run: the episodes in flight and after are masked (never
    scored zero), the circuit breaker stops the run within bounded waits, and each (task,
    sample) is in the file at most once; the run says what is missing."""
    finished = 0

    def kill_both_after_some(_: object) -> None:
        nonlocal finished
        finished += 1
        if finished == 10:
            for server in two_servers:
                server.kill()

    pool = PooledEnvironment([s.url for s in two_servers], "calc", seed=1,
                             health_interval_s=0.1, wait_for_replica_s=0.5)
    output = tmp_path / "calc.jsonl"
    try:
        with pytest.raises(RolloutFailed, match="the rollout stopped") as failed:
            await asyncio.wait_for(
                run(pool, ReferencePolicy(), TASKS, group_size=GROUP, concurrency=4,
                    output=output, on_result=kill_both_after_some, max_consecutive_masked=4,
                    tasks_from=local_calc),
                300,
            )
    finally:
        await pool.aclose()
    summary = failed.value.result.summary  # type: ignore[union-attr]
    records = list(read_records(output))
    pairs = _pairs(records)
    assert len(pairs) == len(set(pairs)) == summary.episodes
    assert summary.episodes + (summary.missing or 0) == len(PLANNED)
    scored = [r for r in records if not r["masked"]]
    masked = [r for r in records if r["masked"]]
    assert len(scored) >= 10 and {r["reward"] for r in scored} == {1.0}
    assert len(masked) >= 4
    assert {r["error"]["kind"] for r in masked} <= {"fleet_error", "replica_lost"}
    assert all(r["reward"] is None for r in masked)

"""Rollouts over a Ray fleet (real multi-node Ray on this machine, ``ray_cluster``): 400
episodes each of calc (through ``envhub rollout --env-fleet``) and sql (through
:class:`FleetEnvironment`) score 1 with exact counts, 1,000 sessions spread evenly over 4
replicas, and a node killed under a rollout
loses no episode and counts none twice, while Ray restarts its replica elsewhere and the
pool sends sessions to it again."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

if not os.environ.get("ENVHUB_REQUIRE_RAY"):  # CI sets it: there a missing Ray fails
    pytest.importorskip("ray", reason="ray is not installed (pip install 'envhub-rl[ray]')")

import envhub
from envhub.clients.fleet import FleetEnvironment
from envhub.fleet.control import (
    ReplicaRecord,
    ReplicaStatus,
    fleet_down,
    fleet_status,
    fleet_up,
)
from envhub.fleet.local_cluster import LocalRayCluster
from envhub.policies.reference import ReferencePolicy
from envhub.rollout import run
from envhub.trajectory import read_records
from tests.fleet.holding import HoldAtSecondTurn
from tests.fleet.polling import server_down, wait_for

pytest.importorskip("envhub.server", reason="the server extra is not installed")

GROUP = 2
TASKS = "test[0:200]"  # 200 tasks x 2 samples: 400 episodes per environment


def _check_all_scored(records: list[dict[str, Any]], planned: int, env: str) -> None:
    """One record per (task, sample), none masked, every one scored 1."""
    pairs = [(r["task_id"], r["sample_index"]) for r in records]
    assert len(records) == planned and len(set(pairs)) == planned
    assert len({r["trajectory_id"] for r in records}) == planned
    assert Counter(sample for _, sample in pairs) == {s: planned // GROUP for s in range(GROUP)}
    assert {r["env"]["name"] for r in records} == {env}
    assert not [r for r in records if r["masked"]]
    assert {r["reward"] for r in records} == {1.0}


# -- 400 episodes each of calc and sql ------------------------------------------------------

ROLLOUT_NS = "test-fleet-rollout"


@pytest.fixture(scope="module")
def calc_sql_fleet(ray_cluster: LocalRayCluster) -> Iterator[list[ReplicaRecord]]:
    records = fleet_up(ray_cluster.address, {"calc": 4, "sql": 2}, namespace=ROLLOUT_NS,
                       resources={"num_cpus": 0.5}, insecure=True)
    try:
        yield records
    finally:
        fleet_down(ray_cluster.address, ROLLOUT_NS)


def test_cli_rollout_of_400_calc_episodes_over_the_fleet(
    ray_cluster: LocalRayCluster, calc_sql_fleet: list[ReplicaRecord], tmp_path: Path
) -> None:
    output = tmp_path / "calc.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", "from envhub.cli import main; main()", "rollout", "calc",
         "--env-fleet", ray_cluster.address, "--fleet-namespace", ROLLOUT_NS,
         "--policy", "reference", "--tasks", TASKS, "--group-size", str(GROUP),
         "--concurrency", "32", "--output", str(output)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "ENVHUB_TOKEN": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = list(read_records(output))
    _check_all_scored(records, 400, "calc")
    calc_replicas = {r.replica_id for r in calc_sql_fleet if r.env == "calc"}
    assert {r["served_by"] for r in records} == calc_replicas  # both replicas took a share
    summary = json.loads(Path(f"{output}.summary.json").read_text())
    assert (summary["episodes"], summary["masked"], summary["mean_reward"]) == (400, 0, 1.0)
    assert sum(c["episodes"] for c in summary["by_replica"].values()) == 400
    assert set(summary["by_replica"]) == calc_replicas


async def test_python_rollout_of_400_sql_episodes_over_the_fleet(
    ray_cluster: LocalRayCluster, calc_sql_fleet: list[ReplicaRecord]
) -> None:
    local = envhub.make("sql")
    fleet = FleetEnvironment(ray_cluster.address, "sql", namespace=ROLLOUT_NS, seed=11)
    try:
        result = await run(fleet, ReferencePolicy(), TASKS, group_size=GROUP, concurrency=32,
                           tasks_from=local)
    finally:
        await fleet.aclose()
        await local.aclose()
    assert result.trajectories is not None
    records = [t.model_dump(mode="json") for t in result.trajectories]
    _check_all_scored(records, 400, "sql")
    sql_replicas = {r.replica_id for r in calc_sql_fleet if r.env == "sql"}
    assert set(result.summary.by_replica) == sql_replicas
    assert sum(c.episodes for c in result.summary.by_replica.values()) == 400


async def test_a_thousand_sessions_spread_evenly_over_four_fleet_replicas(
    ray_cluster: LocalRayCluster, calc_sql_fleet: list[ReplicaRecord]
) -> None:
    fleet = FleetEnvironment(ray_cluster.address, "calc", namespace=ROLLOUT_NS,
                             transport="http", seed=3)
    sessions: list[Any] = []
    try:
        sessions = list(await asyncio.gather(
            *(fleet.open(f"calc-0-{i:05d}") for i in range(1000))
        ))
        rows = await asyncio.to_thread(fleet_status, ray_cluster.address, ROLLOUT_NS)
        counts = {row.replica_id: row.open_sessions or 0 for row in rows if row.env == "calc"}
        assert len(counts) == 4 and sum(counts.values()) == 1000, counts
        assert max(counts.values()) / min(counts.values()) <= 1.3, counts
        assert Counter(s.served_by for s in sessions) == counts  # pinned where they run
    finally:
        await asyncio.gather(*(s.abort() for s in sessions))
        await fleet.aclose()


# -- a node dies under a rollout ------------------------------------------------------------

FAILOVER_NS = "test-fleet-failover"
FAILOVER_SLOT = "failover_slot"  # a custom resource only this test's two nodes offer


@pytest.fixture(scope="module")
def failover_nodes(ray_cluster: LocalRayCluster) -> list[str]:
    """Two worker nodes of this module's own (the session's cluster keeps its nodes for
    the other tests), each with room for both replicas, so the survivor can take the
    dead node's replica when Ray restarts it."""
    names = ["failover-a", "failover-b"]
    for name in names:
        ray_cluster.add_worker(name, num_cpus=2, resources={FAILOVER_SLOT: 2})
    return names


@pytest.fixture
def failover_fleet(
    ray_cluster: LocalRayCluster, failover_nodes: list[str]
) -> Iterator[list[ReplicaRecord]]:
    records = fleet_up(ray_cluster.address, {"calc": 2}, namespace=FAILOVER_NS,
                       resources={"num_cpus": 0.5, FAILOVER_SLOT: 1}, max_restarts=3,
                       insecure=True)
    try:
        yield records
    finally:
        fleet_down(ray_cluster.address, FAILOVER_NS)


@pytest.fixture
async def local_calc() -> AsyncIterator[Any]:
    env = envhub.make("calc")
    yield env
    await env.aclose()


async def test_a_node_killed_mid_rollout_loses_no_episode_and_its_replica_comes_back(
    ray_cluster: LocalRayCluster, failover_nodes: list[str],
    failover_fleet: list[ReplicaRecord], local_calc: Any,
) -> None:
    node_names = {ray_cluster.nodes[name].node_id: name for name in failover_nodes}
    placed = {r.replica_id: r for r in failover_fleet}
    assert {r.node_id for r in failover_fleet} == set(node_names)  # one replica per node
    victim = placed["calc-0"]
    survivor = placed["calc-1"]

    concurrency = 16
    policy = HoldAtSecondTurn(concurrency)
    fleet = FleetEnvironment(ray_cluster.address, "calc", namespace=FAILOVER_NS, seed=5,
                             health_interval_s=0.2, refresh_s=0.5)

    async def kill_the_victims_node_with_sessions_on_it() -> int:
        await policy.all_held.wait()
        states = {s.url: s for s in await fleet.replica_states()}
        open_on_victim = states[victim.url].open_sessions
        assert open_on_victim > 0 and states[survivor.url].open_sessions > 0, states
        killing = asyncio.ensure_future(
            asyncio.to_thread(ray_cluster.kill_node, node_names[victim.node_id])
        )
        await wait_for("the victim's server is gone", lambda: server_down(victim.url), 60)
        policy.released.set()  # before Ray restarts the replica: retries go to the survivor
        await killing
        return open_on_victim

    try:
        killer = asyncio.ensure_future(kill_the_victims_node_with_sessions_on_it())
        result = await run(fleet, policy, TASKS, group_size=GROUP, concurrency=concurrency,
                           on_result=policy.arm_after(40), tasks_from=local_calc)
        open_on_victim = await killer
        assert result.trajectories is not None
        records = [t.model_dump(mode="json") for t in result.trajectories]
        _check_all_scored(records, 400, "calc")

        # exactly the sessions open on the dead node ran again, each once
        retried = [r for r in records if r["metrics"]["retried_errors"]]
        assert len(retried) == open_on_victim
        assert all(r["metrics"]["retried_errors"] == {"replica_lost": 1} for r in retried)
        assert all(r["metrics"]["episode_attempts"] == 2 for r in retried)
        assert result.summary.retried == {"replica_lost": open_on_victim}
        assert set(result.summary.by_replica) <= {"calc-0", "calc-1"}
        assert sum(c.episodes for c in result.summary.by_replica.values()) == 400

        # Ray restarts the replica on the surviving node; it registers a new URL
        def restarted() -> ReplicaStatus | None:
            rows = {s.replica_id: s for s in fleet_status(ray_cluster.address, FAILOVER_NS)}
            row = rows["calc-0"]
            return row if row.restarts == 1 and row.health == "ok" else None

        back = await wait_for("calc-0 restarted and healthy", restarted, 180)
        assert back.url != victim.url
        assert back.node_id == survivor.node_id  # the only alive node with a free slot

        # the same pool finds the new URL and sends sessions there again
        async def pool_knows_it() -> bool:
            return any(s.url == back.url and s.healthy for s in await fleet.replica_states())

        deadline = time.monotonic() + 60
        while not await pool_knows_it():
            assert time.monotonic() < deadline, "the pool did not pick up the restarted replica"
            await asyncio.sleep(0.5)
        sessions = [await fleet.open(f"calc-0-{i:05d}") for i in range(8)]
        try:
            assert Counter(s.served_by for s in sessions) == {"calc-0": 4, "calc-1": 4}
            async with httpx.AsyncClient() as http:
                assert (await http.get(f"{back.url}/health")).json()["sessions"] == 4
        finally:
            for session in sessions:
                await session.close()
    finally:
        await fleet.aclose()

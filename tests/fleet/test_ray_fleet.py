"""The Ray fleet's control plane on a real three-node cluster (``ray_cluster``): replicas
spread over nodes and placed by custom resources, status, restart after SIGKILL with a
new URL under the same id, down leaving nothing behind, the CLI, and clear errors."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import psutil
import pytest
import ray

from envhub.fleet import FleetEnvironment
from envhub.fleet.ray_fleet import (
    ReplicaRecord,
    fleet_down,
    fleet_status,
    fleet_up,
)
from tests.fleet.conftest import RayCluster

SQL_NEEDS = {"sql": {"sandbox_slots": 1}}


def _gcs_actors(names: set[str]) -> dict[str, str]:
    """State of each named actor in Ray's GCS table (no dashboard needed); the latest
    incarnation of a name wins."""
    import ray._private.state as state

    latest: dict[str, tuple[float, str]] = {}
    for info in state.actors().values():
        name = info.get("Name", "")
        if name in names and info["StartTime"] >= latest.get(name, (-1.0, ""))[0]:
            latest[name] = (info["StartTime"], info["State"])
    return {name: st for name, (_, st) in latest.items()}


def _port_closed(url: str) -> bool:
    host, _, port = url.removeprefix("http://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
    except OSError:
        return True
    return False


def _pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(scope="module")
def fleet(ray_cluster: RayCluster) -> Iterator[list[ReplicaRecord]]:
    """calc x3 and sql x1 (sql needs a sandbox slot, which only worker-2 has)."""
    records = fleet_up(
        ray_cluster.address, {"calc": 3, "sql": 1}, namespace="fleet-test",
        env_resources=SQL_NEEDS, serve={"max_sessions": 64},
    )  # fmt: skip
    yield records
    if any(e["namespace"] == "fleet-test" for e in ray.util.list_named_actors(True)):
        fleet_down(ray_cluster.address, "fleet-test")


def test_up_spreads_replicas_over_nodes_and_places_by_resource(
    ray_cluster: RayCluster, fleet: list[ReplicaRecord]
) -> None:
    assert sorted(r.replica_id for r in fleet) == ["calc-0", "calc-1", "calc-2", "sql-0"]
    nodes = {name: node.node_id for name, node in ray_cluster.nodes.items()}
    assert {r.node_id for r in fleet if r.env == "calc"} == set(nodes.values())  # 3 nodes
    (sql,) = [r for r in fleet if r.env == "sql"]
    assert sql.node_id == nodes["worker-2"]  # the only node with sandbox_slots
    assert len({r.url for r in fleet}) == 4 and all(r.registrations == 1 for r in fleet)


def test_status_lists_every_replica_healthy(
    ray_cluster: RayCluster, fleet: list[ReplicaRecord]
) -> None:
    statuses = fleet_status(ray_cluster.address, "fleet-test")
    by_id = {s.replica_id: s for s in statuses}
    assert set(by_id) == {r.replica_id for r in fleet}
    for record in fleet:
        status = by_id[record.replica_id]
        assert (status.env, status.url, status.node_id) == (record.env, record.url,
                                                            record.node_id)
        assert status.health == "ok" and status.restarts == 0
        assert status.capacity == 64 and status.open_sessions == 0


async def test_fleet_environment_runs_sessions_on_the_replicas(
    ray_cluster: RayCluster, fleet: list[ReplicaRecord]
) -> None:
    calc_urls = {r.replica_id for r in fleet if r.env == "calc"}
    async with FleetEnvironment(ray_cluster.address, "calc", namespace="fleet-test") as env:
        task_ids = await env.task_ids()
        sessions = [await env.open(task_ids[0]) for _ in range(6)]
        assert {s.served_by for s in sessions} <= calc_urls
        assert len({s.served_by for s in sessions}) >= 2
        for session in sessions:
            start = await session.reset()
            assert start.messages
            await session.close()
        statuses = fleet_status(ray_cluster.address, "fleet-test")
        assert sum(s.open_sessions or 0 for s in statuses) == 0

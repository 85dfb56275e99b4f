"""The Ray fleet's control plane on a real three-node cluster (``ray_cluster``): replicas
spread over nodes and placed by custom resources, status, restart after SIGKILL with a
new URL under the same id, down leaving nothing behind, the CLI, and clear errors."""

from __future__ import annotations

import asyncio
import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

if not os.environ.get("ENVHUB_REQUIRE_RAY"):  # CI sets it: there a missing Ray fails
    pytest.importorskip("ray", reason="ray is not installed (pip install 'envhub-rl[ray]')")

import ray

import envhub
from envhub.clients.fleet import join_cluster
from envhub.errors import FleetError, ReplicaLost, Unauthorized
from envhub.fleet import FleetEnvironment
from envhub.fleet.control import (
    ReplicaRecord,
    ReplicaStatus,
    fleet_down,
    fleet_status,
    fleet_up,
)
from envhub.fleet.local_cluster import LocalRayCluster
from envhub.fleet.ray_actors import REGISTRY_NAME, replica_actor_name
from envhub.sandboxes.local import DIR_PREFIX as LOCAL_DIR_PREFIX
from envhub.testing import call_tool, free_port
from envhub.testing.conformance import CHECKS, check_client_conformance

SQL_NEEDS = {"sql": {"sandbox_slots": 1}}
TOKEN = "fleet-secret"


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


def _actor_pid(handle: Any) -> int:
    """The process of a live actor, from Ray's GCS table (0 while it is not alive)."""
    import ray._private.state as state

    info = state.actors(handle._actor_id.hex())
    return int(info["Pid"]) if info.get("State") == "ALIVE" else 0


def _local_sandboxes(pid: int) -> list[str]:
    """The ``local`` sandbox directories process ``pid`` made (and did not remove)."""
    return glob.glob(os.path.join(tempfile.gettempdir(), f"{LOCAL_DIR_PREFIX}{pid}-*"))


def _pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(scope="module")
def fleet(ray_cluster: LocalRayCluster) -> Iterator[list[ReplicaRecord]]:
    """calc x3 and sql x1 (sql needs a sandbox slot, which only worker-2 has)."""
    records = fleet_up(
        ray_cluster.address, {"calc": 3, "sql": 1}, namespace="fleet-test",
        env_resources=SQL_NEEDS, serve={"max_sessions": 64, "token": TOKEN},
        options={"sql": {"sandbox": "local"}},  # a sandbox directory per session
    )  # fmt: skip
    yield records
    if any(e["namespace"] == "fleet-test" for e in ray.util.list_named_actors(True)):
        fleet_down(ray_cluster.address, "fleet-test")


def test_up_spreads_replicas_over_nodes_and_places_by_resource(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    assert sorted(r.replica_id for r in fleet) == ["calc-0", "calc-1", "calc-2", "sql-0"]
    calc_nodes = {r.node_id for r in fleet if r.env == "calc"}
    assert len(calc_nodes) == 3 and calc_nodes <= ray_cluster.alive_node_ids()
    (sql,) = [r for r in fleet if r.env == "sql"]
    assert sql.node_id == ray_cluster.nodes["worker-2"].node_id  # only it has sandbox_slots
    assert len({r.url for r in fleet}) == 4 and all(r.registrations == 1 for r in fleet)


def test_status_lists_every_replica_healthy(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
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
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    calc_urls = {r.replica_id for r in fleet if r.env == "calc"}
    async with FleetEnvironment(ray_cluster.address, "calc", namespace="fleet-test",
                                token=TOKEN) as env:  # fmt: skip
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
    # every replica serves with the fleet's token, as `envhub serve --token` does
    async with FleetEnvironment(ray_cluster.address, "calc", namespace="fleet-test") as env:
        with pytest.raises(Unauthorized):
            await env.open(task_ids[0])


async def test_connect_reaches_the_fleet_by_its_ray_address(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    """``envhub.connect("ray://HOST:PORT", env)`` is the fleet's client, what
    ``envhub rollout --env-fleet`` opens."""
    env = envhub.connect(f"ray://{ray_cluster.address}", "calc", namespace="fleet-test",
                         token=TOKEN, transport="http")  # fmt: skip
    assert isinstance(env, FleetEnvironment)
    async with env:
        async with env.open((await env.task_ids())[0]) as session:
            assert session.served_by in {r.replica_id for r in fleet if r.env == "calc"}
            assert (await session.reset()).messages


def _wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 90.0) -> Any:
    """Poll ``predicate`` until it returns something truthy (bounded, so a bug fails
    instead of hanging)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def test_a_killed_replica_restarts_under_its_id_at_a_new_url(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    victim = next(r for r in fleet if r.env == "calc")
    os.kill(victim.pid, signal.SIGKILL)  # the actor's process, as the OOM killer would

    def restarted() -> ReplicaStatus | None:
        now = {s.replica_id: s for s in fleet_status(ray_cluster.address, "fleet-test")}
        status = now[victim.replica_id]
        return status if status.restarts == 1 and status.health == "ok" else None

    status = _wait_for(restarted, f"{victim.replica_id} to come back")
    assert status.url != victim.url and status.pid != victim.pid
    assert _pid_gone(victim.pid) and _port_closed(victim.url)  # the server died with it
    others = {s.replica_id: s for s in fleet_status(ray_cluster.address, "fleet-test")}
    for record in fleet:
        if record.replica_id != victim.replica_id:
            assert (others[record.replica_id].url, others[record.replica_id].restarts) == (
                record.url, 0)


@pytest.mark.parametrize("env_name", ["calc", "sql"])
async def test_fleet_environment_passes_the_client_conformance_suite(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord], env_name: str
) -> None:
    async with FleetEnvironment(ray_cluster.address, env_name, namespace="fleet-test",
                                token=TOKEN) as env:  # fmt: skip
        report = await check_client_conformance(env)
    assert report.passed == list(CHECKS)


async def test_a_restarted_replica_reaps_the_sandboxes_of_its_dead_process(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    (sql,) = [r for r in fleet if r.env == "sql"]
    async with FleetEnvironment(ray_cluster.address, "sql", namespace="fleet-test",
                                token=TOKEN) as env:  # fmt: skip
        session = await env.open()
        await session.reset()
        result = await call_tool(session, "run_sql", query="SELECT 1")
        assert not result.observations[0].is_error, result.observations[0].content
        assert _local_sandboxes(sql.pid)  # the session's, owned by the replica's process
        os.kill(sql.pid, signal.SIGKILL)
        with pytest.raises(ReplicaLost):
            await call_tool(session, "run_sql", query="SELECT 2")
        await session.abort()

    def restarted() -> bool:
        now = {s.replica_id: s for s in fleet_status(ray_cluster.address, "fleet-test")}
        return now[sql.replica_id].restarts == 1 and now[sql.replica_id].health == "ok"

    _wait_for(restarted, "the sql replica to come back")
    assert not _local_sandboxes(sql.pid)


def test_a_killed_registry_restarts_and_the_replicas_fill_it_again(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    def listed() -> dict[str, tuple[str, int]]:
        try:
            statuses = fleet_status(ray_cluster.address, "fleet-test")
        except FleetError:  # the registry is restarting
            return {}
        return {s.replica_id: (s.url, s.restarts) for s in statuses}

    before = listed()
    assert len(before) == len(fleet)
    registry = ray.get_actor(REGISTRY_NAME, namespace="fleet-test")
    old_pid = _actor_pid(registry)
    assert old_pid > 0
    os.kill(old_pid, signal.SIGKILL)
    _wait_for(lambda: listed() == before, "the registry to list every replica again")
    assert _actor_pid(registry) not in (0, old_pid)  # a new registry process


def test_up_without_a_token_is_refused_before_anything_starts(ray_cluster: LocalRayCluster) -> None:
    """The library refuses an open fleet as the CLI does, unless asked for one."""
    for serve in (None, {"token": None}, {"token": ""}, {"max_sessions": 8}):
        with pytest.raises(FleetError, match=r"without a token.*insecure=True"):
            fleet_up(ray_cluster.address, {"calc": 1}, namespace="open", serve=serve)
    assert not [e for e in ray.util.list_named_actors(True) if e["namespace"] == "open"]


def test_up_refuses_a_second_fleet_in_the_namespace(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    with pytest.raises(FleetError, match="already runs in namespace 'fleet-test'"):
        fleet_up(ray_cluster.address, {"calc": 1}, namespace="fleet-test", insecure=True)


def test_up_with_a_resource_no_node_has_fails_before_starting_anything(
    ray_cluster: LocalRayCluster,
) -> None:
    with pytest.raises(FleetError, match="no node of the cluster can hold a calc replica"):
        fleet_up(ray_cluster.address, {"calc": 1}, namespace="no-fit",
                 resources={"num_cpus": 1, "gpu_slots": 1}, insecure=True)  # fmt: skip
    assert not [e for e in ray.util.list_named_actors(True) if e["namespace"] == "no-fit"]
    for bad, why in (({"num_cpus": -1}, "must be a number >= 0"),
                     ({"sandbox_slots": "many"}, "must be a number >= 0"),
                     ({"CPU": 1}, "ask for CPU as num_cpus")):  # fmt: skip
        with pytest.raises(FleetError, match=why):
            fleet_up(ray_cluster.address, {"calc": 1}, namespace="no-fit", resources=bad,
                     insecure=True)


def test_up_on_a_cluster_too_small_fails_in_bounded_time_and_leaves_nothing(
    ray_cluster: LocalRayCluster,
) -> None:
    # 3 CPUs each: one fits on each 4-CPU worker, the other three wait for room
    with pytest.raises(FleetError, match=r"not up within 5s \(it needs \{'CPU': 3\.0\}"):
        fleet_up(ray_cluster.address, {"calc": 5}, namespace="too-small",
                 resources={"num_cpus": 3}, timeout_s=5, insecure=True)  # fmt: skip
    assert not [e for e in ray.util.list_named_actors(True) if e["namespace"] == "too-small"]


def test_up_with_a_replica_that_cannot_start_says_why_and_leaves_nothing(
    ray_cluster: LocalRayCluster,
) -> None:
    with pytest.raises(FleetError, match=r"calc-0 failed to start: .*no_such_option"):
        fleet_up(ray_cluster.address, {"calc": 1}, namespace="bad-option",
                 options={"calc": {"no_such_option": 1}}, timeout_s=60,
                 insecure=True)  # fmt: skip
    assert not [e for e in ray.util.list_named_actors(True) if e["namespace"] == "bad-option"]


def test_no_cluster_at_the_address_is_a_fleet_error_at_once(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    for attempt in (
        lambda: join_cluster(nowhere),
        lambda: fleet_status(nowhere),
        lambda: FleetEnvironment(nowhere, "calc"),
    ):
        with pytest.raises(FleetError, match=f"no Ray cluster at {nowhere}"):
            attempt()
    with pytest.raises(FleetError, match="HOST:PORT"):
        join_cluster("not-an-address")
    # something listens, but it is no Ray head: an envhub server, a peer that never answers
    with socket.create_server(("127.0.0.1", 0)) as silent:
        for wrong in (fleet[0].url.removeprefix("http://"),
                      f"127.0.0.1:{silent.getsockname()[1]}"):  # fmt: skip
            with pytest.raises(FleetError, match=f"no Ray cluster at {wrong}"):
                join_cluster(wrong, timeout_s=2.0)


def test_a_namespace_without_a_fleet_is_a_fleet_error(ray_cluster: LocalRayCluster) -> None:
    for attempt in (
        lambda: fleet_status(ray_cluster.address, "nobody-here"),
        lambda: fleet_down(ray_cluster.address, "nobody-here"),
    ):
        with pytest.raises(FleetError, match="no envhub fleet in namespace 'nobody-here'"):
            attempt()


async def test_an_environment_without_replicas_fails_fast(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    async with FleetEnvironment(ray_cluster.address, "search", namespace="fleet-test") as env:
        with pytest.raises(FleetError, match="no replica of search"):
            await asyncio.wait_for(env.task_ids(), 30)
        with pytest.raises(FleetError, match="no replica of search"):
            await asyncio.wait_for(env.open(), 30)


async def test_down_leaves_no_actor_process_or_port(
    ray_cluster: LocalRayCluster, fleet: list[ReplicaRecord]
) -> None:
    before = fleet_status(ray_cluster.address, "fleet-test")
    names = {REGISTRY_NAME} | {replica_actor_name(s.replica_id) for s in before}
    async with FleetEnvironment(ray_cluster.address, "calc", namespace="fleet-test",
                                token=TOKEN, wait_for_replica_s=1.0) as env:  # fmt: skip
        session = await env.open()  # a session open at down time
        await session.reset()
        report = await asyncio.to_thread(fleet_down, ray_cluster.address, "fleet-test")
        with pytest.raises(ReplicaLost):
            await session.close()
        with pytest.raises(FleetError, match="no envhub fleet in namespace 'fleet-test'"):
            await asyncio.wait_for(env.open(), 30)
    ids = sorted(s.replica_id for s in before)
    assert report.replicas == ids and report.graceful == ids and report.registry
    assert set(report.reaped) == {s.node_id for s in before} and not report.errors
    assert not [e for e in ray.util.list_named_actors(True) if e["namespace"] == "fleet-test"]
    assert set(_gcs_actors(names).values()) == {"DEAD"}
    for status in before + fleet:
        assert _pid_gone(status.pid) and _port_closed(status.url)


def test_cli_up_status_down(ray_cluster: LocalRayCluster) -> None:
    def envhub(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "envhub.cli", "fleet", *args, "--address",
             ray_cluster.address, "--namespace", "cli-test"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    up = envhub("up", "--env", "calc=2", "--max-sessions", "32", "--resources",
                '{"num_cpus": 0.5}', "--env-arg", "calc:num_tasks=50", "--insecure")  # fmt: skip
    assert up.returncode == 0, up.stderr
    assert "warning: --insecure: the replicas require no token" in up.stderr
    assert [line.split("\t")[1] for line in up.stdout.splitlines()] == ["calc-0", "calc-1"]
    status = envhub("status")
    assert status.returncode == 0, status.stderr
    rows = [line for line in status.stdout.splitlines() if "calc-" in line]
    assert len(rows) == 2 and all(" ok " in row and " 32 " in row for row in rows)
    down = envhub("down")
    assert down.returncode == 0, down.stderr
    assert "removed 2 replicas (2 shut down cleanly)" in down.stdout
    gone = envhub("status")
    assert gone.returncode == 2
    assert "error: no envhub fleet in namespace 'cli-test'" in gone.stderr
    assert "Traceback" not in gone.stderr


def test_a_replica_of_a_dead_node_restarts_on_another_node(ray_cluster: LocalRayCluster) -> None:
    # SPREAD is best effort (under load it doubles up), so a custom resource that only the
    # doomed node has puts the replica there; a second node with it joins once the replica
    # is up, as an autoscaler's replacement would, and is where the restart must land
    slot = {"node_loss_slot": 1}
    doomed = ray_cluster.add_worker("doomed", num_cpus=1, resources=slot)
    (record,) = fleet_up(ray_cluster.address, {"calc": 1}, namespace="node-loss",
                         resources={"num_cpus": 1, **slot}, insecure=True)  # fmt: skip
    try:
        assert record.node_id == doomed.node_id
        rescue = ray_cluster.add_worker("rescue", num_cpus=1, resources=slot)
        ray_cluster.kill_node("doomed")

        def moved() -> ReplicaStatus | None:
            (now,) = fleet_status(ray_cluster.address, "node-loss")
            return now if now.health == "ok" and now.restarts == 1 else None

        status = _wait_for(moved, "the dead node's replica to restart elsewhere")
        assert status.replica_id == record.replica_id and status.node_id == rescue.node_id
        assert status.url != record.url
    finally:
        report = fleet_down(ray_cluster.address, "node-loss")
        if "rescue" in ray_cluster.nodes:
            ray_cluster.kill_node("rescue")
    assert len(report.replicas) == 1

"""``envhub fleet up --containers``: each replica runs its environment's image on its node
(real multi-node Ray, ``ray_cluster``, and real Docker). A container killed under a
rollout: its episodes run again on the other replica, none is lost, scored zero or
counted twice, and the replica's supervisor starts a replacement container that it
registers at a new URL; ``fleet down`` removes every container."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

import pytest

if not os.environ.get("ENVHUB_REQUIRE_RAY"):  # CI sets it: there a missing Ray fails
    pytest.importorskip("ray", reason="ray is not installed (pip install 'envhub-rl[ray]')")

import envhub
from envhub.clients.fleet import FleetEnvironment
from envhub.fleet.control import fleet_down, fleet_status, fleet_up
from envhub.fleet.local_cluster import LocalRayCluster
from envhub.rollout import run
from envhub.sandboxes.docker_cli import run_docker
from tests.fleet.holding import HoldAtSecondTurn
from tests.fleet.polling import server_down, wait_for
from tests.images.conftest import docker_problem

NS = "test-fleet-containers"
TOKEN = "fleet-container-token"


def _containers() -> dict[str, str]:
    """``{replica id: container id}`` of this test's namespace."""
    out = run_docker(
        "ps", "-a", "--filter", f"label=envhub.fleet.namespace={NS}",
        "--format", '{{.ID}} {{.Label "envhub.fleet.replica"}}', check=True,
    ).stdout  # fmt: skip
    return {rid: cid for cid, rid in (line.split() for line in out.splitlines())}


async def test_a_killed_container_is_replaced_and_its_episodes_run_again(
    ray_cluster: LocalRayCluster,
) -> None:
    if (problem := docker_problem()) is not None:
        pytest.skip(problem)
    from envhub.environment_images import build_env_image

    build_env_image("calc")  # what each replica would otherwise build on its node
    records = fleet_up(ray_cluster.address, {"calc": 2}, namespace=NS, containers=True,
                       resources={"num_cpus": 0.5}, serve={"token": TOKEN})  # fmt: skip
    local = envhub.make("calc")
    fleet = FleetEnvironment(ray_cluster.address, "calc", namespace=NS, token=TOKEN, seed=5,
                             health_interval_s=0.2, refresh_s=0.5)  # fmt: skip
    try:
        placed = {r.replica_id: r for r in records}
        containers = _containers()
        assert set(containers) == {"calc-0", "calc-1"}
        for rid, cid in containers.items():  # the registered URL is the container's port
            port = run_docker("port", cid, "8000", check=True).stdout.split(":")[-1].strip()
            assert placed[rid].url.endswith(f":{port}")
        victim = placed["calc-0"]

        concurrency = 8
        policy = HoldAtSecondTurn(concurrency)

        async def kill_the_container_with_sessions_on_it() -> int:
            await policy.all_held.wait()
            states = {s.url: s for s in await fleet.replica_states()}
            open_on_victim = states[victim.url].open_sessions
            assert open_on_victim, states
            await asyncio.to_thread(run_docker, "kill", containers["calc-0"], check=True)
            await wait_for("the victim's container is gone", lambda: server_down(victim.url))
            policy.released.set()
            return int(open_on_victim)

        killer = asyncio.ensure_future(kill_the_container_with_sessions_on_it())
        result = await run(fleet, policy, "test[0:40]", group_size=1, concurrency=concurrency,
                           on_result=policy.arm_after(8), tasks_from=local)  # fmt: skip
        open_on_victim = await killer
        assert result.trajectories is not None
        trajectories = result.trajectories
        assert len(trajectories) == 40 and len({t.task_id for t in trajectories}) == 40
        assert not [t for t in trajectories if t.masked]
        assert {t.reward for t in trajectories} == {1.0}
        retried = [t for t in trajectories if t.metrics.retried_errors]
        assert len(retried) == open_on_victim
        assert Counter(str(t.metrics.retried_errors) for t in retried) == {
            str({"replica_lost": 1}): open_on_victim
        }

        def replaced() -> Any:
            rows = {s.replica_id: s for s in fleet_status(ray_cluster.address, NS)}
            row = rows["calc-0"]
            return row if row.restarts == 1 and row.health == "ok" else None

        back = await wait_for("calc-0 serving from a replacement container", replaced)
        assert back.url != victim.url and back.pid == victim.pid  # same actor, new container
        assert _containers()["calc-0"] != containers["calc-0"]
    finally:
        await fleet.aclose()
        await local.aclose()
        fleet_down(ray_cluster.address, NS)
    assert _containers() == {}


def test_serve_args_are_flags_envhub_serve_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container replica gets the options and serve settings a process replica would."""
    import typer.main

    monkeypatch.delenv("ENVHUB_TOKEN", raising=False)

    from envhub.cli import app
    from envhub.fleet.container_server import serve_args

    serve = {"max_sessions": 64, "session_ttl_s": 30.0, "token": "t", "max_turns": 5,
             "tool_timeout_s": 2.0, "episode_timeout_s": 60.0, "mcp": True}  # fmt: skip
    args = serve_args({"mode": "text", "n": 3}, serve)
    group = typer.main.get_command(app)
    command = group.commands["serve"]  # type: ignore[attr-defined]
    params = command.make_context("serve", ["calc", *args]).params
    assert params["env_arg"] == ["mode=\"text\"", "n=3"]
    assert (params["max_sessions"], params["session_ttl"], params["max_turns"]) == (64, 30.0, 5)
    assert (params["tool_timeout"], params["episode_timeout"], params["mcp"]) == (2.0, 60.0, True)
    assert params["token"] is None  # the token travels as ENVHUB_TOKEN, never in argv

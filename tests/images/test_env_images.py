"""Environment images (``envhub image build``) serving the API from a container: the
conformance suite over HTTP and WebSocket and ``envhub check`` on a sample of tasks
through each container, the container's confinement, and content tagging."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.clients.remote import RemoteEnvironment
from envhub.environment_images.run import NETWORK, Container
from envhub.sandboxes.docker_cli import run_docker
from envhub.testing.conformance import CHECKS, check_client_conformance
from tests.images.conftest import IMAGE_ENVS, TOKEN


@pytest.mark.parametrize("env", IMAGE_ENVS)
@pytest.mark.parametrize("transport", ["http", "ws"])
async def test_container_passes_the_conformance_suite(
    containers: dict[str, Container], env: str, transport: Literal["http", "ws"]
) -> None:
    client = RemoteEnvironment(containers[env].url, env, token=TOKEN, transport=transport)
    try:
        report = await check_client_conformance(client)
    finally:
        await client.aclose()
    assert report.passed == list(CHECKS)


@pytest.mark.parametrize("env", IMAGE_ENVS)
def test_envhub_check_through_the_container(containers: dict[str, Container], env: str) -> None:
    """The reference policy scores 1 and no-op 0 on a sample of tasks served by the
    container (gold actions from the plugin installed here, as with any --env-url)."""
    url = containers[env].url
    runner = CliRunner()
    result = runner.invoke(
        app, ["check", env, "--env-url", url, "--env-token", TOKEN, "--tasks", "0:6"]
    )
    assert result.exit_code == 0, result.output
    assert "ok: 6 tasks" in result.output
    # without the token the container refuses
    denied = runner.invoke(app, ["check", env, "--env-url", url, "--tasks", "0:1"])
    assert denied.exit_code != 0


def test_the_container_is_confined(containers: dict[str, Container]) -> None:
    """Non-root, read-only root file system, every capability dropped, memory (no swap)
    and pids limited, on envhub's bridge with only the API port published (on
    127.0.0.1), no route off this machine."""
    container = containers["sql"]
    state = json.loads(run_docker("inspect", container.id).stdout)[0]
    host = state["HostConfig"]
    assert state["Config"]["User"] == "1000:1000"
    assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert not [o for o in host["SecurityOpt"] if "unconfined" in o]  # not a nested_sandbox
    assert host["Memory"] == host["MemorySwap"] == 4 * 2**30 and host["PidsLimit"] == 4096
    assert list(state["NetworkSettings"]["Networks"]) == [NETWORK]
    ports = state["NetworkSettings"]["Ports"]
    assert list(ports) == ["8000/tcp"]
    assert {(b["HostIp"]) for b in ports["8000/tcp"]} == {"127.0.0.1"}
    options = json.loads(run_docker("network", "inspect", NETWORK).stdout)[0]["Options"]
    assert options["com.docker.network.bridge.enable_ip_masquerade"] == "false"
    assert options["com.docker.network.bridge.enable_icc"] == "false"

    probe = (
        "import os, socket\n"
        "print(os.getuid())\n"
        "try:\n    open('/opt/envhub/x', 'w')\nexcept OSError as e:\n    print('ro', e.errno)\n"
        "s = socket.socket(); s.settimeout(3)\n"
        "print('connect', s.connect_ex(('1.1.1.1', 443)))\n"
    )
    out = run_docker("exec", container.id, "python", "-c", probe)
    assert out.returncode == 0, out.stderr
    uid, ro, connect = out.stdout.split("\n")[:3]
    assert uid == "1000" and ro == "ro 30"  # EROFS
    assert connect != "connect 0"


def test_unchanged_rebuild_is_a_no_op_and_a_new_version_a_new_tag(
    env_images: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import envhub.environment_images.build as build
    from envhub.environment_images import build_env_image
    from envhub.environment_images.wheelhouse import Source

    tag = build_env_image("calc")  # the tree's current tag (the fixture's, unless it changed)
    created = run_docker("image", "inspect", "-f", "{{.Id}} {{.Created}}", tag)
    ran: list[str] = []
    monkeypatch.setattr(build, "_docker_build", lambda ctx, *tags: ran.append(tags[0]))
    assert build_env_image("calc") == tag
    assert ran == []  # nothing built: the tag exists
    again = run_docker("image", "inspect", "-f", "{{.Id}} {{.Created}}", tag)
    assert again.stdout == created.stdout

    real_plugin_source = build.plugin_source

    def bumped(env: str, extras: object = ()) -> Source:
        src = real_plugin_source(env, extras)  # type: ignore[arg-type]
        return Source(src.name, src.version + ".post1", src.root, src.paths, src.requires)

    monkeypatch.setattr(build, "plugin_source", bumped)
    plan = build.plan_env_image("calc")
    assert plan.tag != tag and plan.tag.startswith("envhub/calc:")
    assert plan.runtime_tag == build.plan_env_image("sql").runtime_tag  # shared runtime


async def test_a_container_killed_mid_rollout_masks_its_episodes(
    env_images: dict[str, str],
) -> None:
    """Episodes whose server container dies are masked with the reason (retried first,
    `max_env_attempts`), never scored zero; those finished before keep their reward."""
    import asyncio

    import envhub
    from envhub.environment_images.run import start_container, stop_container
    from envhub.rollout import run
    from tests.fleet.holding import HoldAtSecondTurn

    container = await asyncio.to_thread(start_container, env_images["calc"], token=TOKEN)
    client = RemoteEnvironment(container.url, "calc", token=TOKEN, retries=1, backoff_s=0.05)
    local = envhub.make("calc")
    policy = HoldAtSecondTurn(4)

    async def kill_with_sessions_open() -> int:
        await policy.all_held.wait()  # every slot holds an episode: the others have finished
        finished = policy.finished
        await asyncio.to_thread(stop_container, container.id)
        policy.released.set()
        return finished

    try:
        killer = asyncio.ensure_future(kill_with_sessions_open())
        result = await run(client, policy, "test[0:12]", group_size=1, concurrency=4,
                           on_result=policy.arm_after(4), tasks_from=local,
                           max_masked_fraction=1.0)  # fmt: skip
        finished_before_kill = await killer
    finally:
        await client.aclose()
        await local.aclose()
        await asyncio.to_thread(stop_container, container.id)
    assert result.trajectories is not None
    trajectories = result.trajectories
    assert len({t.task_id for t in trajectories}) == 12
    scored = [t for t in trajectories if not t.masked]
    masked = [t for t in trajectories if t.masked]
    assert len(scored) == finished_before_kill >= 4 and {t.reward for t in scored} == {1.0}
    assert len(masked) == 12 - finished_before_kill  # the 4 held at the kill, those not started
    assert all(t.reward is None and t.error is not None for t in masked)
    assert all(t.metrics.episode_attempts == 3 for t in masked)  # retried before masking


def test_image_list_and_rm(env_images: dict[str, str]) -> None:
    """`envhub image list` shows the environment and runtime images; `envhub image rm ENV`
    removes that environment's tags only (here an alias of calc's image)."""
    runner = CliRunner()
    listed = runner.invoke(app, ["image", "list"])
    assert listed.exit_code == 0, listed.output
    for tag in env_images.values():
        assert tag in listed.output
    assert "envhub/runtime:" in listed.output
    alias = "envhub/rmtest:alias"
    assert run_docker("tag", env_images["calc"], alias).returncode == 0
    assert alias in runner.invoke(app, ["image", "list", "rmtest"]).output
    removed = runner.invoke(app, ["image", "rm", "rmtest"])
    assert removed.exit_code == 0 and alias in removed.output
    assert run_docker("image", "inspect", alias).returncode != 0
    assert run_docker("image", "inspect", env_images["calc"]).returncode == 0
    refused = runner.invoke(app, ["image", "rm"])  # neither ENV nor --all
    assert refused.exit_code != 0

"""The SWE environment's image: its episodes make bwrap sandboxes inside the container
(recipe ``nested_sandbox``; no container engine or Docker socket in there), ``envhub
check`` passes through it, and the model's ``bash`` runs confined within the container."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.clients.remote import RemoteEnvironment
from envhub.sandboxes.docker_cli import run_docker
from envhub.testing import call_tool
from tests.images.conftest import TOKEN, docker_problem

#: run by the model's `bash` tool: what the sandbox sees of the server and the network, and
#: whether the container's seccomp profile refuses it the kernel keyring
PROBE = (
    "id -u; cat /proc/sys/kernel/hostname; ls /opt/envhub 2>&1; env | grep -c ENVHUB_TOKEN; "
    "cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'envhub[ ]serve'; "
    'python3 -c "import socket; s = socket.socket(); s.settimeout(3); '
    "print('api', s.connect_ex(('127.0.0.1', 8000)))\"; "
    "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
    "python3 -c \"import ctypes, os; nr = {'x86_64': 250, 'aarch64': 219}[os.uname().machine]; "
    "libc = ctypes.CDLL(None, use_errno=True); libc.syscall(nr, 0, 0, 0, 0); "
    "print('keyctl errno', ctypes.get_errno())\""
)


@pytest.fixture(scope="module")
def swe_image() -> str:
    if (problem := docker_problem()) is not None:
        pytest.skip(problem)
    from envhub.environment_images import build_env_image

    return build_env_image("swe")  # the `bwrap` sandbox image first, if missing


def _first_task(repo: str) -> str:
    from envhub_swe.instances import load_instances

    return next(t.id for t in load_instances() if t.metadata["repo"] == f"pypi/{repo}")


async def _bash(url: str, task_id: str, command: str) -> str:
    """The observation of the model's ``bash`` tool, one call in a fresh episode."""
    client = RemoteEnvironment(url, "swe", token=TOKEN, transport="http")
    try:
        async with client.open(task_id) as session:
            step = await call_tool(session, "bash", command=command)
    finally:
        await client.aclose()
    return step.observations[0].content


def test_swe_image_checks_a_task_in_bwrap_sandboxes_inside_the_container(swe_image: str) -> None:
    from envhub.environment_images.run import start_container, stop_container

    container = start_container(swe_image, token=TOKEN)
    try:
        state = json.loads(
            run_docker("inspect", container.id, check=True).stdout
        )[0]  # fmt: skip
        host = state["HostConfig"]
        assert state["Config"]["User"] == "1000:1000"  # bwrap needs no root in here
        assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in host["SecurityOpt"]
        # the nested_sandbox relaxation: envhub's seccomp profile, not none
        (seccomp,) = [o for o in host["SecurityOpt"] if o.startswith("seccomp=")]
        assert "keyctl" in seccomp and host["MaskedPaths"] == []  # systempaths=unconfined
        assert not any("docker.sock" in b for b in host["Binds"] or [])

        task_id = _first_task("inflection")
        args = ["check", "swe", "--env-url", container.url, "--env-token", TOKEN]
        result = CliRunner().invoke(app, [*args, "--tasks", task_id])
        assert result.exit_code == 0, result.output
        assert "ok: 1 tasks" in result.output  # the gold patch resolves it, no-op does not
        out = asyncio.run(_bash(container.url, task_id, PROBE))
    finally:
        stop_container(container.id)
    assert out.startswith("<returncode>0</returncode>"), out
    lines = out.split("<output>\n", 1)[1].removesuffix("</output>").rstrip("\n").split("\n")
    assert lines[:2] == ["1000", "envhub"]  # a bwrap sandbox, not the server's shell
    assert lines[2] == "ls: cannot access '/opt/envhub': No such file or directory"
    # the server's token, processes and API port are out of reach; only a loopback device
    assert lines[3:5] == ["0", "0"]
    assert lines[5] == "api 111"  # ECONNREFUSED: the sandbox's own empty network namespace
    assert [x for x in lines[6:-1] if x] == ["lo"]
    assert lines[-1] == "keyctl errno 1"  # EPERM: the profile holds inside the sandbox too

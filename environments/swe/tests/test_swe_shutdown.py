"""Stopping ``envhub serve swe`` (SIGTERM, Ctrl-C) releases its warm sandbox pool: no
container and no sandbox directory of the server outlives it; ``envhub check`` releases
its pools when it finishes.

uvicorn re-raises the signal once its lifespan has shut down, so exit hooks never run
(and the pools have none): the server and the CLI release the pools through the
``Environment`` lifecycle. A real server process, real sandboxes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.sandboxes.docker import LABEL
from envhub.sandboxes.docker_cli import run_docker
from envhub.sandboxes.local import DIR_PREFIX
from envhub.testing import free_port, wait_for_http

POOL_SIZE = 2


def _containers(pid: int) -> list[str]:
    out = run_docker("ps", "-aq", "--filter", f"label={LABEL}",
                     "--filter", f"label=envhub.owner.pid={pid}", check=True).stdout  # fmt: skip
    return out.split()


def _sandboxes(backend: str, pid: int, tmp: Path) -> list[str]:
    """The server's sandboxes: its containers, or the directories in its temp dir."""
    if backend == "docker":
        return _containers(pid)
    return [p.name for p in tmp.glob("envhub-local-*")]


def _wait_for(predicate, timeout_s: float, proc: subprocess.Popen[bytes]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            _give_up(proc)
        time.sleep(0.2)


def _give_up(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    output = proc.stdout.read().decode() if proc.stdout else ""
    pytest.fail(f"gave up waiting (server exit code {proc.wait()}):\n{output}")


@pytest.mark.parametrize(
    ("backend", "signum"),
    [("local", signal.SIGTERM), ("local", signal.SIGINT), ("docker", signal.SIGTERM)],
)
def test_stopping_the_server_releases_the_warm_pool(
    backend: str,
    signum: signal.Signals,
    ci_task_ids: list[str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if backend == "docker":
        request.getfixturevalue("swe_images")  # skips (or fails in CI) without Docker
    tmp = tmp_path / "tmp"  # the server's temp dir: where its local sandboxes live
    tmp.mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "envhub.cli", "serve", "swe", "--sandbox", backend,
         "--env-arg", f"pool_size={POOL_SIZE}", "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_for_http(f"{url}/health", timeout_s=120, gone=lambda: proc.poll() is not None):
            _give_up(proc)
        created = httpx.post(
            f"{url}/v1/sessions", json={"env": "swe", "task_id": ci_task_ids[0]}, timeout=300
        )
        assert created.status_code == 200, created.text
        # one sandbox in the open episode, POOL_SIZE warm ones waiting for the next
        _wait_for(lambda: len(_sandboxes(backend, proc.pid, tmp)) >= POOL_SIZE + 1, 300, proc)
        proc.send_signal(signum)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    leaked = _sandboxes(backend, proc.pid, tmp)
    if leaked and backend == "docker":
        run_docker("rm", "-f", *leaked)
    assert leaked == []


@pytest.mark.usefixtures("earlier_clients_freed")
def test_envhub_check_releases_the_pools(ci_task_ids: list[str]) -> None:
    """In-process, so a pool left open would still hold its sandbox directories here."""
    result = CliRunner().invoke(
        app,
        ["check", "swe", "--sandbox", "local", "--tasks", ci_task_ids[0],
         "--env-arg", "pool_size=1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert list(Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}{os.getpid()}-*")) == []

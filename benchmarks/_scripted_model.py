"""Rollout benchmark plumbing: the scripted model server as a separate process.

The server runs in its own process so that the harness's CPU time is measured alone
(and the server's reported beside it); the script is ``tests/rollout/scripted_server.py``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from envhub._util.net import free_port, wait_for_http

ROOT = Path(__file__).resolve().parents[1]
SERVER_SCRIPT = ROOT / "tests" / "rollout" / "scripted_server.py"


class ServerProcess:
    """A running scripted server: its base URL and its CPU time so far."""

    def __init__(self, base_url: str, pid: int) -> None:
        self.base_url = base_url
        self.pid = pid

    def cpu_s(self) -> float:
        fields = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_note() -> str:
    """The machine's load, printed with the figures (other jobs skew wall-clock rates)."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.1f} (1 min), {five:.1f} (5 min)"


@contextlib.contextmanager
def scripted_server_process(*args: str) -> Iterator[ServerProcess]:
    """Start the scripted server process; yields it once it answers."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        if not wait_for_http(f"{base_url}/models", timeout_s=30,
                             gone=lambda: proc.poll() is not None):  # fmt: skip
            raise RuntimeError("the scripted server did not start")
        yield ServerProcess(base_url, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def server_root(base_url: str) -> str:
    return base_url.removesuffix("/v1")


def run(coro: object) -> object:
    """``asyncio.run`` on uvloop when installed (as ``envhub rollout`` does)."""
    from envhub.rollout.runtime import run_async

    return run_async(coro)  # type: ignore[arg-type]


__all__ = ["ROOT", "ServerProcess", "load_note", "run", "scripted_server_process", "server_root"]

"""``envhub serve`` replicas as subprocesses on free 127.0.0.1 ports, for pool and fleet
tests: started together (an interpreter start each is the slow part), killable one by one
with SIGKILL as a crash would, and stopped at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from envhub.testing import free_port, wait_for_http
from envhub.types import Health

_CLI = "import envhub.cli.serve; from envhub.cli._app import app; app()"


@dataclass
class ServeProcess:
    """One ``envhub serve`` subprocess and its base URL."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Any  # the server's output (a temporary file: a pipe nobody reads would fill)

    def output(self) -> str:
        self.log.seek(0)
        return str(self.log.read().decode(errors="replace"))

    def health(self) -> Health:
        answer = httpx.get(f"{self.url}/health", timeout=10)
        answer.raise_for_status()
        return Health.model_validate_json(answer.content)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill: no shutdown, sockets dropped."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


@contextlib.contextmanager
def serve_processes(
    count: int, envs: Sequence[str] = ("calc",), args: Sequence[str] = ()
) -> Iterator[list[ServeProcess]]:
    """``count`` servers of ``envs`` (``args``: more ``envhub serve`` flags); each is
    stopped on exit unless a test killed it already."""
    servers: list[ServeProcess] = []
    try:
        for _ in range(count):
            port = free_port()
            command = [sys.executable, "-c", _CLI, "serve", *envs, "--port", str(port),
                       # a loaded machine must not end episodes by calc's wall clock
                       "--episode-timeout", "86400", "--log-level", "warning", *args]
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "ENVHUB_TOKEN": ""})
            servers.append(ServeProcess(f"http://127.0.0.1:{port}", proc, log))
        for server in servers:
            _wait_healthy(server)
        yield servers
    finally:
        for server in servers:
            if server.proc.poll() is None:
                server.proc.terminate()
        for server in servers:
            try:
                server.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait()
            server.log.close()


def _wait_healthy(server: ServeProcess, timeout_s: float = 120.0) -> None:
    if not wait_for_http(f"{server.url}/health", timeout_s=timeout_s,
                         gone=lambda: server.proc.poll() is not None):  # fmt: skip
        raise RuntimeError(f"envhub serve at {server.url} did not come up:\n{server.output()}")

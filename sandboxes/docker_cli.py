"""The docker command-line client, run the one way envhub runs it.

Image builds, environment containers and the tests that look at them drive the ``docker``
CLI (the Docker sandbox backend uses the Python SDK, and the CLI only for ``exec``
streams). :func:`run_docker` finds the CLI (a :class:`~envhub.errors.SandboxError`
naming the fix where it is missing), captures its output as text, and with ``check``
turns a failure into a ``SandboxError`` that quotes what docker said.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import IO, Any

from envhub.errors import SandboxError

__all__ = ["docker_cli", "run_docker"]


def docker_cli() -> str:
    """The path of the ``docker`` CLI; :class:`SandboxError` when it is not installed."""
    docker = shutil.which("docker")
    if docker is None:
        raise SandboxError("docker CLI not found: apt-get install docker.io")
    return docker


def run_docker(
    *args: str,
    check: bool = False,
    stdin: IO[Any] | int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``docker ARGS``, its stdout and stderr captured as text.

    ``check``: a non-zero exit raises :class:`SandboxError` with the end of its stderr.
    ``stdin``: what the command reads (another process's stdout, for ``docker import``).
    ``env`` adds to docker's environment: values that ``-e NAME`` passes on to a container
    without showing them on any command line.
    """
    proc = subprocess.run(
        [docker_cli(), *args], stdin=stdin, capture_output=True, text=True, errors="replace",
        env={**os.environ, **env} if env else None, timeout=timeout,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise SandboxError(f"docker {args[0]} failed: {proc.stderr.strip()[-3000:]}")
    return proc

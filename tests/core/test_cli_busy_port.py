"""``envhub serve`` and ``envhub view`` on a port another server listens on: one line that
names the address and says it is in use, exit 2, and no "serving at" line before it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from envhub._util.net import bound_socket
from tests.view.runs import minimal_record


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port of 127.0.0.1 that a listening socket of this process holds."""
    with bound_socket() as sock:
        sock.listen()
        yield int(sock.getsockname()[1])


def _envhub(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envhub.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "ENVHUB_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"},
    )  # fmt: skip


def test_serve_and_view_refuse_a_port_in_use_before_they_say_they_serve(
    busy_port: int, tmp_path: Path
) -> None:
    run = tmp_path / "run.jsonl"
    run.write_bytes(orjson.dumps(minimal_record(0)) + b"\n")
    for args in (["serve", "calc"], ["view", str(run)]):
        done = _envhub(tmp_path, *args, "--port", str(busy_port))
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        output = done.stdout + done.stderr
        assert "serving" not in output and "http://" not in output, (args, output)
        assert done.stderr.strip().splitlines() == [
            f"error: 127.0.0.1:{busy_port} is in use (another server listens there); "
            "pass another --port"
        ], args

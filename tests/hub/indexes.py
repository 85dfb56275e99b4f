"""Package indexes for the hub tests: a real ``pypiserver`` on 127.0.0.1, hand-made wheels
(a card that is missing, malformed, or names an envhub-rl range; a plain dependency), and
the ``envhub`` command in a child process."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envhub._util.net import free_port, wait_for_http

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def pypiserver(packages: Path) -> Iterator[str]:
    """A pypiserver serving ``packages`` (uploads open to anyone, no fallback to PyPI);
    yields its simple API URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pypiserver", "run", "--host", "127.0.0.1", "--port", str(port),
         "--disable-fallback", "-P", ".", "-a", ".", str(packages)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/simple/"
    try:
        assert wait_for_http(url, timeout_s=30, gone=lambda: proc.poll() is not None), url
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def write_wheel(
    folder: Path,
    name: str,
    version: str,
    *,
    requires: tuple[str, ...] = (),
    card: bytes | None = None,
    entry_points: str = "",
) -> Path:
    """A pure-Python wheel of ``name`` with an empty package, these requirements, entry
    points and card (``None``: none), valid down to its RECORD."""
    stem = f"{name.replace('-', '_')}-{version}"
    metadata = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
         f"Summary: {name} for the hub tests", *(f"Requires-Dist: {r}" for r in requires)]
    ) + "\n"  # fmt: skip
    files = {
        f"{name.replace('-', '_')}/__init__.py": b"",
        f"{stem}.dist-info/METADATA": metadata.encode(),
        f"{stem}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if entry_points:
        files[f"{stem}.dist-info/entry_points.txt"] = entry_points.encode()
    if card is not None:
        files[f"{stem}.dist-info/envhub-card.json"] = card
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()
    ) + f"{stem}.dist-info/RECORD,,\n"  # fmt: skip
    wheel = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{stem}.dist-info/RECORD", record)
    return wheel


def start_envhub(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.Popen[str]:
    """``envhub ARGS`` started in a child process (``-m envhub.cli``, the checkout's
    envhub), stdin not a terminal, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "envhub.cli", *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )  # fmt: skip


def finish(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    """What a started ``envhub`` printed, once it ended."""
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run_envhub(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``envhub ARGS`` run to its end (:func:`start_envhub`)."""
    return finish(start_envhub(*args, env=env))


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The error line of a refused command (exit 2), after checking that it is the last
    line on stderr, the only one that is an error, and that no traceback was printed
    (lines before it say what the command was doing)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error")]
    assert errors == lines[-1:] and errors[0].startswith("error: "), proc.stderr
    return errors[0]

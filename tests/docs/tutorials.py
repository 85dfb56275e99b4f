"""Run a tutorial of ``docs/tutorials/`` as a reader would: its code blocks, in order.

The Markdown is the source of truth. A fenced block's title, or an HTML comment right
before it (the rendered page does not show comments), says how the block is used:

- no comment: a ``bash`` block runs with ``bash -euo pipefail``, a ``python`` block with
  ``python``; blocks of other languages (output, a directory tree) are only read;
- a block with a title (`` ```toml title="guess/pyproject.toml" ``, which the site shows
  above the block) is a file: it is written to that path, as the reader saves it;
- ``<!-- background: URL -->``: the ``bash`` block starts a server (the reader runs it in
  a second terminal); the next block runs once ``GET URL`` answers 200 (a
  ``tcp://HOST:PORT`` URL: once the port accepts connections), and the server's process
  group is stopped when the tutorial ends;
- ``<!-- not run: REASON -->``: shown only (a GPU, a cluster, a real model server).

Every block runs in one working directory, in a fresh process, with the test's
environment: the venv's ``bin`` first on ``PATH`` and ``$PORT``-style variables set to free
ports (the text tells the reader to pick any free port). A block that fails raises
:class:`BlockFailed` with the block's text and its output.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from envhub._util.net import wait_for_http

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "docs" / "tutorials"

_BLOCK = re.compile(
    r"(?:<!--\s*(?P<marker>[^>]*?)\s*-->[ \t]*\n(?:[ \t]*\n)*)?"
    r"^```(?P<lang>[\w-]*)(?P<info>[^\n]*)\n(?P<body>.*?)^```[ \t]*$",
    re.S | re.M,
)
_TITLE = re.compile(r'\btitle="([^"]+)"')
_RUN = {"bash": ("bash", "-euo", "pipefail", "-c"), "python": ("python", "-c")}


class BlockFailed(AssertionError):
    """A tutorial block exited non-zero (or its server did not come up)."""


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its text, its marker (``kind: argument``)."""

    lang: str
    body: str
    kind: str = "run"
    argument: str = ""

    def describe(self, output: str) -> str:
        return (
            f"```{self.lang}\n{self.body}```\n--- output (last 6000 characters) ---\n"
            + (output[-6000:])
        )


def blocks(markdown: str) -> list[Block]:
    """The fenced blocks of ``markdown`` in order, with their markers."""
    found = []
    for match in _BLOCK.finditer(markdown):
        kind, _, argument = (match["marker"] or "run").partition(":")
        title = _TITLE.search(match["info"])
        if title is not None and not match["marker"]:
            kind, argument = "file", title[1]
        found.append(Block(match["lang"], match["body"], kind.strip(), argument.strip()))
    unknown = {b.kind for b in found} - {"run", "file", "background", "not run"}
    if unknown:
        raise ValueError(f"unknown block markers {sorted(unknown)}")
    return found


@contextmanager
def _servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Background processes, each the leader of its own process group, stopped (the
    whole group: a server and its children) on exit."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group (a server shuts down cleanly), SIGKILL after 20 s, and SIGKILL
    to whatever of the group outlives its leader."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def run_tutorial(
    page: Path,
    workdir: Path,
    env: Mapping[str, str],
    *,
    timeout_s: float = 300.0,
    startup_timeout_s: float = 180.0,
) -> list[str]:
    """Run the tutorial ``page`` in ``workdir`` with ``env``; returns each run block's
    output. Raises :class:`BlockFailed` on the first failing block."""
    name = page.name
    outputs = []
    with _servers() as servers:
        for block in blocks(page.read_text("utf-8")):
            if block.kind == "not run" or (block.kind == "run" and block.lang not in _RUN):
                continue
            if block.kind == "file":
                path = workdir / block.argument
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(block.body, "utf-8")
                continue
            if block.lang not in _RUN:
                raise ValueError(f"{name}: a {block.kind} block must be bash or python")
            command = [*_RUN[block.lang], block.body]
            if block.kind == "background":
                servers.append(_start(command, workdir, env, block, startup_timeout_s))
                continue
            outputs.append(_run(command, workdir, env, block, name, timeout_s))
    return outputs


def _run(
    command: list[str], workdir: Path, env: Mapping[str, str], block: Block, name: str,
    timeout_s: float,
) -> str:  # fmt: skip
    """A foreground block's output; in a process group of its own, so a block that runs
    past ``timeout_s`` is stopped with everything it started."""
    proc = subprocess.Popen(
        command, cwd=workdir, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as timeout:
        _stop_group(proc)
        said = (timeout.output or b"").decode(errors="replace")
        raise BlockFailed(
            f"{name}: block ran past {timeout_s:.0f} s\n{block.describe(said)}"
        ) from None
    said = output.decode(errors="replace")
    if proc.returncode != 0:
        raise BlockFailed(f"{name}: block exited {proc.returncode}\n{block.describe(said)}")
    return said


def _start(
    command: list[str], workdir: Path, env: Mapping[str, str], block: Block, timeout_s: float
) -> subprocess.Popen[bytes]:
    log = workdir / f".background-{abs(hash(block.body))}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=workdir, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    url = _expand(block.argument, env)

    def gone() -> bool:
        return proc.poll() is not None

    if url.startswith("tcp://"):
        host, _, port = url.removeprefix("tcp://").rpartition(":")
        ready = _wait_for_port(host, int(port), timeout_s=timeout_s, gone=gone)
    else:
        ready = wait_for_http(url, timeout_s=timeout_s, gone=gone)
    if not ready:
        _stop_group(proc)
        said = log.read_text(errors="replace")
        raise BlockFailed(f"server did not answer {url}\n{block.describe(said)}")
    return proc


def _wait_for_port(host: str, port: int, *, timeout_s: float, gone: Callable[[], bool]) -> bool:
    """Poll until ``host:port`` accepts a TCP connection (a server that speaks no HTTP)."""
    deadline = time.monotonic() + timeout_s
    while not gone() and time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False


def _expand(text: str, env: Mapping[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` replaced from ``env`` (the block's environment, not the
    test process's)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env[m[1]], text)

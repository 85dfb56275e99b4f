"""Run one host subprocess with a timeout, a process-group kill and capped output.

Every backend ends up here (``local`` runs the command, ``bwrap`` runs ``bwrap``,
``docker`` runs the ``docker exec`` client), so the rules that protect the host live in
one place: at most ``limit`` bytes per stream are kept (the rest is drained and counted,
so a 1 GB stdout costs a pipe's worth of memory), and a timeout kills the whole process
group rather than just the direct child.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence

from envhub.sandboxes.base import RawResult

__all__ = ["CappedBuffer", "kill_group", "run_process", "start_failure"]

_CHUNK = 256 * 1024
_EXIT_GRACE_S = 0.5  # how long pipes may stay open after the command exited


class CappedBuffer:
    """Keeps the first 3/4 and the last 1/4 of ``limit`` bytes and counts the rest.

    Why head *and* tail: an agent needs both what a command started printing and the
    error it ended with (mini-swe-agent keeps head+tail for the same reason).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head_limit = limit * 3 // 4
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def value(self) -> bytes:
        if not self.truncated:
            return bytes(self.head + self.tail)
        dropped = self.total - len(self.head) - len(self.tail)
        marker = f"\n[envhub: {dropped} bytes truncated]\n".encode()
        return bytes(self.head) + marker + bytes(self.tail)


async def _pump(stream: asyncio.StreamReader | None, buf: CappedBuffer) -> None:
    if stream is None:
        return
    while True:
        chunk = await stream.read(_CHUNK)
        if not chunk:
            return
        buf.feed(chunk)


async def _feed_stdin(proc: asyncio.subprocess.Process, data: bytes | None) -> None:
    if proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            proc.stdin.write(data)
            await proc.stdin.drain()
        proc.stdin.close()
        await proc.stdin.wait_closed()


def start_failure(program: str, exc: OSError) -> RawResult:
    """The result of a command that could not be started as given (missing program or
    working directory, no permission, arguments too long): its own failure, with the
    exit code a shell gives it (127 not found, else 126), not the sandbox's."""
    code = 127 if exc.errno == errno.ENOENT else 126
    message = f"envhub: cannot run {program}: {exc.strerror or exc}\n".encode()
    return RawResult(exit_code=code, stderr=message, stderr_bytes=len(message))


def kill_group(pid: int) -> None:
    """SIGKILL a process group we created with ``start_new_session``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_process(
    argv: Sequence[str],
    *,
    timeout: float,
    limit: int,
    stdin: bytes | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    on_spawn: Callable[[int], None] | None = None,
    on_exit: Callable[[int], None] | None = None,
) -> RawResult:
    """Run ``argv`` in its own session; ``on_spawn``/``on_exit`` let a sandbox track
    live process groups so ``close()`` can kill them."""
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    if on_spawn:
        on_spawn(proc.pid)
    out, err = CappedBuffer(limit), CappedBuffer(limit)
    pumps = asyncio.gather(
        _pump(proc.stdout, out), _pump(proc.stderr, err), _feed_stdin(proc, stdin)
    )
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except asyncio.TimeoutError:
            timed_out = True
            kill_group(proc.pid)
            await proc.wait()
        # A background child may still hold the pipes open: give it a moment, then
        # kill the group so a forgotten `cmd &` cannot hang the caller.
        try:
            await asyncio.wait_for(asyncio.shield(pumps), _EXIT_GRACE_S if not timed_out else 2)
        except asyncio.TimeoutError:
            kill_group(proc.pid)
            try:
                await asyncio.wait_for(asyncio.shield(pumps), 2)
            except asyncio.TimeoutError:
                pumps.cancel()
    except BaseException:
        kill_group(proc.pid)
        pumps.cancel()
        raise
    finally:
        if on_exit:
            on_exit(proc.pid)
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return RawResult(
        exit_code=128 - rc if rc < 0 else rc,
        stdout=out.value(),
        stderr=err.value(),
        timed_out=timed_out,
        duration_s=time.monotonic() - t0,
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )

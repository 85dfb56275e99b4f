"""Worker processes that can be killed: where code runs on arguments a model chose.

A model's call can make BFCL's backends, or its checker (which replays the calls), compute
for minutes: ``round(5, -12_000_000)`` alone holds a core, and the GIL, for 13 s. Python
code cannot be stopped from outside its thread, and on the event loop it stops every
session of the server. So that code runs in a child process, which is killed when its
caller stops waiting (the session's tool timeout cancels the call, a verdict runs past
its limit): the loop only waits on a socket, and nothing the call left behind survives.

A :class:`Worker` serves one owner (one episode's backends, one verdict) with one handler
object, built in the child as ``factory(*args)``: a callable from a request string to a
reply string. No child is ever handed to a second owner, so no state passes between
them. Children fork from a zygote that has BFCL imported (:mod:`envhub_bfcl._zygote`,
one per server process, started on first use): a start costs milliseconds. Each child's
address space is capped at :data:`MEMORY_BYTES` over the zygote's, so a memory blow-up
fails its request (``MemoryError``) instead of the machine, and it is killed through a
pidfd, which cannot hit another process that reused its pid.

Failures, as envhub scores them:

- the child cannot start, or its handler cannot be built: ``SandboxError``
  (infrastructure, the episode is masked);
- the handler raised on a request: ``ToolError`` with its message (the request's outcome);
- the child died while it handled a request (a crash past the memory cap), or its reply
  is over :data:`MAX_REPLY_BYTES`: ``ToolError`` saying so, and the worker is gone;
- the caller was cancelled (a timeout): the child is killed and the cancellation goes on.

The protocol on the worker's socket is the zygote's (:mod:`envhub_bfcl._zygote`):
one line per request (the caller's text, which must hold no newline: JSON does not),
one JSON line per reply. The child exits when the socket closes, and dies with the
zygote, which exits when the server does.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from envhub.errors import SandboxError, ToolError

__all__ = ["MAX_REPLY_BYTES", "MEMORY_BYTES", "Worker"]

MEMORY_BYTES = 2 << 30
MAX_REPLY_BYTES = 64 << 20
#: a child's start and handler build (the first start also starts the zygote)
START_TIMEOUT_S = 60.0
#: ``python -c``, with the current directory taken off ``sys.path`` (``-P`` is 3.11+)
_ZYGOTE_CODE = "import sys; del sys.path[0]; from envhub_bfcl._zygote import main; main({memory})"


class _Zygote:
    """The zygote process and the socket its children's sockets are passed over."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        code = _ZYGOTE_CODE.format(memory=MEMORY_BYTES)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code], stdin=theirs, stdout=subprocess.DEVNULL
            )
        finally:
            theirs.close()
        self.owner = os.getpid()
        self.channel = ours
        ours.settimeout(START_TIMEOUT_S)
        if ours.recv(16) != b"ready\n":
            self.process.kill()
            raise OSError(f"the zygote exited ({self.process.wait()})")
        ours.settimeout(None)

    @property
    def usable(self) -> bool:
        """Started by this process (a forked server starts its own) and still running."""
        return self.owner == os.getpid() and self.process.poll() is None


_zygote_lock = threading.Lock()
_zygote: _Zygote | None = None


def _fork_child(sock: socket.socket) -> None:
    """Have the zygote (started now if need be) fork a child serving ``sock``; blocking."""
    global _zygote
    with _zygote_lock:
        try:
            if _zygote is None or not _zygote.usable:
                _zygote = _Zygote()
            socket.send_fds(_zygote.channel, [b"w"], [sock.fileno()])
        except OSError as exc:
            _zygote = None
            raise SandboxError(f"cannot start a BFCL worker process: {exc}") from exc


class Worker:
    """One child process serving one handler for one owner (see the module docstring)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._pidfd: int | None = None
        self.alive = True

    @classmethod
    async def start(cls, factory: Callable[..., Callable[[str], str]], *args: Any) -> Worker:
        """A child running ``factory(*args)``, ready for requests (``factory`` and ``args``
        must pickle: a module-level class and plain data)."""
        ours, theirs = socket.socketpair()
        try:
            await asyncio.to_thread(_fork_child, theirs)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        worker = cls(ours)
        try:
            await asyncio.wait_for(worker._set_up(factory, args), START_TIMEOUT_S)
        except BaseException as exc:
            worker.kill()
            if isinstance(exc, asyncio.TimeoutError | ToolError | OSError | ValueError):
                raise SandboxError(f"a BFCL worker process did not start: {exc}") from exc
            raise
        return worker

    async def _set_up(self, factory: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Take the child's pid as a pidfd, send it its handler, wait until it is built."""
        hello = json.loads(await self._read_line())
        self._pidfd = os.pidfd_open(int(hello["pid"]))
        setup = pickle.dumps((factory, args))
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(self._sock, len(setup).to_bytes(8, "big") + setup)
        ready = json.loads(await self._read_line())
        if ready != {"ready": True}:
            raise ValueError(str(ready)[:500])

    async def ask(self, request: str) -> str:
        """The handler's reply to ``request`` (see the module docstring for failures)."""
        if not self.alive:
            raise ToolError("the worker process is gone")
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_sendall(self._sock, request.encode() + b"\n")
            line = await self._read_line()
        except BaseException:
            self.kill()  # cancelled or dead mid-request: the child's state is unknown
            raise
        reply = json.loads(line)
        if "error" in reply:
            raise ToolError(str(reply["error"]))
        return str(reply["reply"])

    async def _read_line(self) -> bytes:
        loop = asyncio.get_running_loop()
        searched = 0
        while (end := self._buffer.find(b"\n", searched)) < 0:
            if len(self._buffer) > MAX_REPLY_BYTES:
                self.kill()
                raise ToolError(f"the reply is over {MAX_REPLY_BYTES} bytes")
            searched = len(self._buffer)
            chunk = await loop.sock_recv(self._sock, 1 << 20)
            if not chunk:
                self.kill()
                raise ToolError(
                    "the worker process died (over its memory cap of "
                    f"{MEMORY_BYTES >> 30} GiB, or a crash)"
                )
            self._buffer += chunk
        line = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return line

    def kill(self) -> None:
        """Stop the child now (SIGKILL) and close the socket; safe to repeat."""
        if not self.alive:
            return
        self.alive = False
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:  # it already exited
                pass
            os.close(self._pidfd)
        self._sock.close()

"""Worker processes that run model-written queries for the server-side executor.

sqlite checks its progress handler (and ``interrupt()``) only between steps of its
virtual machine, never inside one function call, so a single call can run far past a
query's limit: ``printf('%.*c', 2e9, 'x')`` loops two billion times, and ``instr``,
``replace``, ``trim`` or ``LIKE`` over megabyte strings are quadratic. A thread cannot be
stopped from outside; a process can. A query therefore goes to an idle worker (the
runner of :mod:`envhub_sql.connection` in ``--serve`` mode), and a worker that has not
answered :data:`GRACE_S` after the query's limit is killed: the model reads a timeout,
the thread and the CPU are free again, and the next query gets a fresh worker. A
worker's address space is capped at :data:`WORKER_MEMORY_BYTES`, so a memory blow-up
fails that query instead of the server.

The pool belongs to the process (a forked child starts its own), grows with the number
of queries running at once and keeps up to :data:`MAX_IDLE` idle workers. Workers read
their requests from a pipe, so they exit when the server does.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path

from envhub.errors import SandboxError
from envhub_sql.connection import (
    ACK,
    GRACE_S,
    READY,
    SETUP_FAILED,
    QueryError,
    QueryResult,
    QueryTimeout,
    decode_result,
)

__all__ = ["MAX_IDLE", "RUNNER", "WORKER_MEMORY_BYTES", "WorkerPool", "worker_pool"]

RUNNER = resources.files("envhub_sql").joinpath("connection.py").read_text("utf-8")
WORKER_MEMORY_BYTES = 1 << 30
#: like asyncio.to_thread's default pool, which bounds how many queries run at once
MAX_IDLE = min(32, (os.cpu_count() or 1) + 4)
_START_TIMEOUT_S = 30.0


class _Overran(Exception):
    """No reply by the deadline: the worker is killed and the query timed out."""


class _Crashed(Exception):
    """The worker exited while running the query: the query's doing (memory, a crash).
    ``received``: what it had written until then."""

    def __init__(self, received: bytes) -> None:
        super().__init__()
        self.received = received


class _Stale(Exception):
    """The worker was gone before the request reached it: not the query's doing."""


class _Worker:
    """One runner process, started and ready (else ``SandboxError``: infrastructure);
    used by one thread at a time."""

    def __init__(self) -> None:
        argv = [sys.executable or "python3", "-I", "-S", "-c", RUNNER, "--serve"]
        try:
            self.proc = subprocess.Popen(
                [*argv, str(WORKER_MEMORY_BYTES)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C goes to the server, not here
            )
        except OSError as exc:
            raise SandboxError(f"cannot start a SQL worker process: {exc}") from exc
        try:  # from here on, a worker that dies while it runs a query died of the query
            ready = self._read_line(time.monotonic() + _START_TIMEOUT_S)
        except (_Overran, _Crashed):
            ready = b""
        if ready.strip() != READY.encode():
            raise SandboxError(f"a SQL worker process did not start (status {self.kill()})")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, request: bytes, deadline: float) -> bytes:
        """Send one request line; the reply line, read until ``deadline`` at most. The
        worker acknowledges a request before it runs it, so a worker that was already
        gone (``_Stale``) is told apart from one the query took down (``_Crashed``)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise _Stale from None
        try:
            reply = self._read_line(deadline)
        except _Crashed as crash:
            if not crash.received:  # not even the acknowledgement came back
                raise _Stale from None
            raise
        return reply.removeprefix(ACK.encode())

    def _read_line(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        reply = bytearray()
        while not reply.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000):
                raise _Overran
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise _Crashed(bytes(reply))
            reply += chunk
        return bytes(reply)

    def kill(self) -> int:
        """Stop the process (if it still runs); its exit status."""
        self.proc.kill()
        status = self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        return status


class WorkerPool:
    """Idle workers of this process; :meth:`run` blocks, so call it from a worker thread."""

    def __init__(self, max_idle: int = MAX_IDLE) -> None:
        self.max_idle = max_idle
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._closes = 0  # a worker whose query began before the last close is not kept

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
        return _Worker()

    def _put(self, worker: _Worker, closes: int) -> None:
        with self._lock:
            if closes == self._closes and len(self._idle) < self.max_idle:
                self._idle.append(worker)
                return
        worker.kill()

    def run(self, db: Path, query: str, *, timeout_s: float, max_rows: int | None) -> QueryResult:
        """Run an already gated ``query`` on ``db``; raises ``QueryError`` for the model."""
        request = {"db": str(db), "query": query, "timeout_s": timeout_s, "max_rows": max_rows}
        line = (json.dumps(request) + "\n").encode()
        closes = self._closes
        for _ in range(2):  # a worker that died while idle is replaced once
            worker = self._take()
            try:
                reply = worker.ask(line, time.monotonic() + timeout_s + GRACE_S)
            except _Stale:
                worker.kill()
                continue
            except _Overran:
                worker.kill()
                raise QueryTimeout.after(timeout_s) from None
            except _Crashed:
                status = worker.kill()
                if status == SETUP_FAILED:
                    raise SandboxError(f"a SQL worker process cannot open {db}") from None
                raise QueryError(
                    f"the query crashed the process running it (exit status {status})"
                ) from None
            self._put(worker, closes)
            return decode_result(reply.decode())
        raise SandboxError("SQL worker processes exit before they can take a query")

    def close(self) -> None:
        """Stop the idle workers (busy ones stop when their query ends)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._closes += 1
        for worker in idle:
            worker.kill()


_pool: tuple[int, WorkerPool] | None = None
_pool_lock = threading.Lock()


def worker_pool() -> WorkerPool:
    """This process's pool (a forked child must not share its parent's pipes)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), WorkerPool())
        return _pool[1]

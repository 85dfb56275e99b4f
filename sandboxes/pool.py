"""``SandboxPool``: keep sandboxes pre-started so an episode gets one in milliseconds.

Rules: a sandbox is used by one episode only (``release`` destroys it, never returns it
to the pool) so no state leaks between episodes; a background task keeps ``min_idle``
ready sandboxes (plus one per waiting ``acquire``); the pool never holds more than
``max_total`` (idle + starting + in use); failed starts are retried with exponential
backoff and counted in ``metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from envhub.errors import SandboxError
from envhub.sandboxes._select import make_sandbox, resolve_backend
from envhub.sandboxes.base import Sandbox, SandboxSpec

__all__ = ["PoolMetrics", "SandboxPool"]


class PoolMetrics(BaseModel):
    """Counters for dashboards and the server's /metrics."""

    started: int = 0
    start_failures: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    acquired: int = 0
    released: int = 0
    expired: int = 0
    idle: int = 0
    starting: int = 0
    in_use: int = 0
    waiting: int = 0


class SandboxPool:
    """A warm pool of sandboxes of one spec and backend (see module docstring)."""

    def __init__(
        self,
        spec: SandboxSpec,
        backend: str | None = None,
        *,
        min_idle: int = 2,
        max_total: int = 16,
        start_concurrency: int = 4,
        backoff_s: tuple[float, float] = (0.2, 10.0),
        name: str | None = None,
        **options: Any,
    ) -> None:
        if max_total < 1 or min_idle < 0 or min_idle > max_total:
            raise ValueError("need 0 <= min_idle <= max_total and max_total >= 1")
        self.spec = spec
        self.backend = resolve_backend(backend)
        self.min_idle = min_idle
        self.max_total = max_total
        self.start_concurrency = max(1, start_concurrency)
        self.backoff_s = backoff_s
        self.name = name or f"pool-{uuid.uuid4().hex[:8]}"
        if self.backend == "docker":
            options.setdefault("pool", self.name)  # label: `envhub sandbox gc --pool NAME`
        self.options = options
        self._idle: deque[Sandbox] = deque()
        self._in_use: set[Sandbox] = set()
        self._starting = 0
        self._waiters = 0
        self._wake = asyncio.Event()
        self._ready = asyncio.Condition()
        self._filler: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._failures = 0
        self._retry_at = 0.0
        self._metrics = PoolMetrics()

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> SandboxPool:
        if self._filler is None:
            self._filler = asyncio.create_task(self._fill_loop(), name="envhub-sandbox-pool")
        return self

    async def close(self) -> None:
        """Stop refilling and destroy every sandbox the pool still owns (in-use included)."""
        self._closed = True
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
        pending = list(self._tasks)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        victims = [*self._idle, *self._in_use]
        self._idle.clear()
        self._in_use.clear()
        await asyncio.gather(*(sb.close() for sb in victims), return_exceptions=True)
        async with self._ready:
            self._ready.notify_all()

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.close())

    # -- episode API -----------------------------------------------------------------
    async def acquire(self, timeout: float | None = 120.0) -> Sandbox:
        """A started sandbox for one episode; ``SandboxError`` if none is ready in time."""
        if self._closed:
            raise SandboxError("sandbox pool is closed")
        await self.start()
        sb = self._pop_idle()
        if sb is not None:
            return self._hand_out(sb)
        try:
            return await asyncio.wait_for(self._next_idle(), timeout)
        except asyncio.TimeoutError:
            raise SandboxError(
                f"no {self.backend} sandbox ready after {timeout}s "
                f"(last start error: {self._metrics.last_error})"
            ) from None

    def _hand_out(self, sb: Sandbox) -> Sandbox:
        """Count ``sb`` as in use in the same step that took it off the idle queue.

        A sandbox must never be in neither place, or the filler would see room and
        start one past ``max_total``.
        """
        self._in_use.add(sb)
        self._metrics.acquired += 1
        self._wake.set()
        return sb

    async def release(self, sandbox: Sandbox) -> None:
        """Destroy an acquired sandbox; the pool starts a fresh one to replace it."""
        self._in_use.discard(sandbox)
        self._metrics.released += 1
        try:
            await sandbox.close()
        finally:
            self._wake.set()

    @contextlib.asynccontextmanager
    async def sandbox(self, timeout: float | None = 120.0) -> AsyncIterator[Sandbox]:
        """``async with pool.sandbox() as sb``: acquire, then always release."""
        sb = await self.acquire(timeout)
        try:
            yield sb
        finally:
            await asyncio.shield(self.release(sb))

    async def wait_idle(self, n: int | None = None, timeout: float | None = 120.0) -> None:
        """Wait until ``n`` (default ``min_idle``) sandboxes are ready, e.g. at warm-up."""
        want = self.min_idle if n is None else min(n, self.max_total)
        await self.start()

        async def _wait() -> None:
            async with self._ready:
                await self._ready.wait_for(lambda: self._closed or self.metrics.idle >= want)

        await asyncio.wait_for(_wait(), timeout)

    @property
    def metrics(self) -> PoolMetrics:
        m = self._metrics.model_copy()
        m.idle, m.starting, m.in_use = len(self._idle), self._starting, len(self._in_use)
        m.waiting = self._waiters
        return m

    @property
    def total(self) -> int:
        return len(self._idle) + self._starting + len(self._in_use)

    # -- internals -------------------------------------------------------------------
    async def _next_idle(self) -> Sandbox:
        """Wait as one of ``waiters`` (each asks the filler for a sandbox beyond
        ``min_idle``) until a sandbox is handed out; the count drops in the same step."""
        self._waiters += 1
        self._wake.set()
        try:
            async with self._ready:
                while True:
                    sb = self._pop_idle()
                    if sb is not None:
                        return self._hand_out(sb)
                    if self._closed:
                        raise SandboxError("sandbox pool is closed")
                    await self._ready.wait()
        finally:
            self._waiters -= 1

    def _pop_idle(self) -> Sandbox | None:
        while self._idle:
            sb = self._idle.popleft()
            if not sb.closed:
                return sb
            self._metrics.expired += 1  # lifetime ran out while idle
        return None

    def _wanted(self) -> int:
        live = [sb for sb in self._idle if not sb.closed]
        self._metrics.expired += len(self._idle) - len(live)  # lifetime ran out while idle
        self._idle = deque(live)
        want = self.min_idle + self._waiters - len(live) - self._starting
        room = self.max_total - self.total
        return max(0, min(want, room, self.start_concurrency - self._starting))

    async def _fill_loop(self) -> None:
        while not self._closed:
            self._wake.clear()
            delay = self._retry_at - time.monotonic()
            if delay > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            for _ in range(self._wanted()):
                self._starting += 1
                task = asyncio.create_task(self._start_one())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await self._wake.wait()

    async def _start_one(self) -> None:
        sb = make_sandbox(self.spec, self.backend, **self.options)
        try:
            await sb.start()
        except Exception as exc:
            self._starting -= 1
            self._failures += 1
            self._metrics.start_failures += 1
            self._metrics.consecutive_failures = self._failures
            self._metrics.last_error = f"{type(exc).__name__}: {exc}"
            lo, hi = self.backoff_s
            self._retry_at = time.monotonic() + min(hi, lo * 2 ** (self._failures - 1))
            self._wake.set()
            return
        except asyncio.CancelledError:
            self._starting -= 1
            await asyncio.shield(sb.close())
            raise
        self._starting -= 1
        self._failures = 0
        self._metrics.consecutive_failures = 0
        self._metrics.started += 1
        if self._closed:
            await sb.close()
            return
        self._idle.append(sb)
        self._wake.set()
        async with self._ready:
            self._ready.notify_all()

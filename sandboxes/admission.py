"""Admission control: how many sandboxes of a backend may be *starting* at once on this
node, and how fast new starts may begin.

Every start goes through :meth:`Sandbox.start <envhub.sandboxes.base.Sandbox.start>`, which
holds :func:`admit` around the backend's ``_start``: ``open_sandbox``, ``make_sandbox(...).start()``
and the warm pool's refills all pass this one seam, so a burst of 500 episode starts
reaches the engine as at most ``concurrency`` creations in flight, begun at most ``rate``
per second (a token bucket of ``burst`` tokens; waiters get up to ``jitter`` of one
interval added so they do not hit the engine in lockstep). A start that cannot be admitted
within ``wait_s`` raises :class:`~envhub.errors.SandboxError`: an infrastructure failure, so
the rollout retries the episode on a fresh session and masks it, never scores it.

Why per backend: a ``local`` start is a ``mkdir``, a ``docker`` start a container create
that an engine serves a few dozen of per second; the limits differ (``DEFAULTS``).
Why ``scope``: ``process`` (the default) limits one process, exactly and without
polling. ``node`` shares the limits between processes on one machine (several
``envhub serve`` workers): the concurrency slots are ``flock``-ed files and the bucket's
state a file, under ``$ENVHUB_CACHE/sandbox-admission/<backend>/``; the kernel drops a dead
process's locks, so a crash never leaks a slot. A node-scoped waiter polls (every 20-40 ms).

Configuration, most specific first: :func:`configure_admission` (the Python API, which
``envhub serve --sandbox-admission`` calls), then ``ENVHUB_SANDBOX_ADMISSION`` (JSON: backend
name, or ``"*"`` for all, to fields of :class:`AdmissionLimits`), then ``DEFAULTS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import random
import struct
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envhub.errors import InvalidRequest, SandboxError
from envhub.runtime.cache import cache_root

__all__ = [
    "ENV_VAR",
    "AdmissionLimits",
    "AdmissionStats",
    "admission_limits",
    "admission_stats",
    "admit",
    "configure_admission",
    "parse_admission",
]

ENV_VAR = "ENVHUB_SANDBOX_ADMISSION"
_CORES = os.cpu_count() or 1
_POLL_S = 0.02


class AdmissionLimits(BaseModel):
    """One backend's admission limits (see module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int = Field(2 * _CORES, ge=1, description="sandboxes starting at once")
    rate: float | None = Field(None, gt=0, description="starts begun per second; None: no cap")
    burst: int = Field(2 * _CORES, ge=1, description="starts allowed back to back")
    jitter: float = Field(0.5, ge=0, le=1, description="random extra wait, in intervals")
    wait_s: float = Field(300.0, gt=0, description="longest wait to be admitted")
    scope: Literal["process", "node"] = "process"


class AdmissionStats(BaseModel):
    """Counters of one backend's limiter, for tests, benchmarks and dashboards."""

    admitted: int = 0
    rejected: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    waited_s: float = 0.0


#: Limits a normal run never reaches: starts at once = 2x cores everywhere; docker also
#: at most 20 creations begun per second (engines fail or stall under bursts above that).
DEFAULTS: dict[str, AdmissionLimits] = {
    "docker": AdmissionLimits(rate=20.0),
}

_configured: dict[str, AdmissionLimits] = {}
_limiters: dict[str, _Limiter] = {}
_registry_lock = threading.Lock()


def configure_admission(backend: str, limits: AdmissionLimits | Mapping[str, Any] | None) -> None:
    """Set (``None``: forget) the limits of ``backend`` (``"*"``: every backend without
    its own) for this process; starts already admitted keep their slot."""
    value = None if limits is None else _parse(backend, limits)
    with _registry_lock:
        if value is None:
            _configured.pop(backend, None)
        else:
            _configured[backend] = value
        _limiters.clear()


def admission_limits(backend: str) -> AdmissionLimits:
    """The limits that apply to ``backend`` now (see module docstring for the order)."""
    from_env = _from_env()
    for table in (_configured, from_env):
        for key in (backend, "*"):
            if key in table:
                return table[key]
    return DEFAULTS.get(backend, AdmissionLimits())


def admission_stats(backend: str) -> AdmissionStats:
    """This process's counters for ``backend`` (zeros before its first start)."""
    limiter = _limiters.get(backend)
    return limiter.stats.model_copy() if limiter is not None else AdmissionStats()


@contextlib.asynccontextmanager
async def admit(backend: str) -> AsyncIterator[None]:
    """Hold one of ``backend``'s start slots, after the bucket let this start begin."""
    limiter = _limiter(backend)
    release = await limiter.acquire()
    try:
        yield
    finally:
        release()


def _parse(backend: str, limits: AdmissionLimits | Mapping[str, Any]) -> AdmissionLimits:
    if isinstance(limits, AdmissionLimits):
        return limits
    try:
        return AdmissionLimits.model_validate(dict(limits))
    except ValidationError as exc:
        why = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidRequest(f"sandbox admission limits for {backend!r}: {why}") from None


def parse_admission(text: str, source: str = ENV_VAR) -> dict[str, AdmissionLimits]:
    """Limits per backend from JSON (``{"docker": {"concurrency": 8, "rate": 5}, "*": {...}}``),
    the form ``ENVHUB_SANDBOX_ADMISSION`` and ``envhub serve --sandbox-admission`` take; a bad
    value is a one-line :class:`InvalidRequest` naming ``source``."""
    try:
        table = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"{source} is not JSON: {exc}") from None
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise InvalidRequest(f'{source} must map backends to limits: {{"docker": {{"rate": 5}}}}')
    return {name: _parse(name, value) for name, value in table.items()}


_env_cache: tuple[str, dict[str, AdmissionLimits]] = ("", {})


def _from_env() -> dict[str, AdmissionLimits]:
    """``ENVHUB_SANDBOX_ADMISSION``, parsed once per distinct value."""
    global _env_cache
    raw = os.environ.get(ENV_VAR, "")
    if raw != _env_cache[0]:
        _env_cache = (raw, parse_admission(raw))
    return _env_cache[1]


def _limiter(backend: str) -> _Limiter:
    limits = admission_limits(backend)
    with _registry_lock:
        limiter = _limiters.get(backend)
        if limiter is None or limiter.limits != limits:
            limiter = _limiters[backend] = _Limiter(backend, limits)
        return limiter


class _Limiter:
    """Concurrency slots plus a GCRA token bucket, shared by every thread and event loop
    of the process (the warm pools of a plugin run on their own loop thread)."""

    def __init__(self, backend: str, limits: AdmissionLimits) -> None:
        self.backend = backend
        self.limits = limits
        self.stats = AdmissionStats()
        self._lock = threading.Lock()
        self._free = limits.concurrency
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._tat = 0.0  # the bucket's theoretical arrival time (time.monotonic)
        self._dir = cache_root("sandbox-admission") / backend.replace(":", "_").replace("/", "_")

    async def acquire(self) -> Callable[[], None]:
        """Wait for a slot, then for the bucket; the returned callable gives the slot back."""
        began = time.monotonic()
        deadline = began + self.limits.wait_s
        if self.limits.scope == "node":
            release = await self._node_slot(deadline)
        else:
            await self._process_slot(deadline)
            release = self._give_back
        try:
            await self._bucket(deadline)
        except BaseException:
            release()
            raise
        with self._lock:
            self.stats.admitted += 1
            self.stats.in_flight += 1
            self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)
            self.stats.waited_s += time.monotonic() - began

        def done() -> None:
            with self._lock:
                self.stats.in_flight -= 1
            release()

        return done

    def _reject(self, why: str) -> SandboxError:
        with self._lock:
            self.stats.rejected += 1
        return SandboxError(
            f"{self.backend} sandbox not admitted within {self.limits.wait_s:g}s ({why}); "
            f"limits: {self.limits.concurrency} starting at once, "
            f"{self.limits.rate or 'unlimited'} starts/s ({ENV_VAR})"
        )

    # -- process scope: exact, woken in FIFO order ----------------------------------------
    async def _process_slot(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            fut: asyncio.Future[None] = loop.create_future()
            entry = (loop, fut)
            self._waiters.append(entry)
        try:
            await asyncio.wait_for(fut, max(0.0, deadline - time.monotonic()))
        except BaseException as exc:
            fut.cancel()
            with self._lock:
                queued = entry in self._waiters
                if queued:
                    self._waiters.remove(entry)
            if not queued and fut.done() and not fut.cancelled():
                self._give_back()  # granted as we gave up: pass the slot on
            # granted but not yet delivered: _deliver sees the cancelled future and passes it
            if isinstance(exc, asyncio.TimeoutError):
                raise self._reject("all start slots busy") from None
            raise

    def _give_back(self) -> None:
        with self._lock:
            if not self._waiters:
                self._free += 1
                return
            loop, fut = self._waiters.popleft()
        try:
            loop.call_soon_threadsafe(self._deliver, fut)
        except RuntimeError:  # that loop is closed: its waiter is gone
            self._give_back()

    def _deliver(self, fut: asyncio.Future[None]) -> None:
        if fut.done():
            self._give_back()
        else:
            fut.set_result(None)

    # -- node scope: flock-ed slot files, polled ----------------------------------------
    async def _node_slot(self, deadline: float) -> Callable[[], None]:
        self._dir.mkdir(parents=True, exist_ok=True)
        while True:
            for i in random.sample(range(self.limits.concurrency), self.limits.concurrency):
                fd = os.open(self._dir / f"slot-{i}", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return lambda: os.close(fd)  # closing drops the lock
            if time.monotonic() >= deadline:
                raise self._reject("all start slots of this node busy")
            await asyncio.sleep(_POLL_S * (1 + random.random()))

    # -- the bucket ------------------------------------------------------------------
    async def _bucket(self, deadline: float) -> None:
        """GCRA: a start may begin at ``tat - (burst - 1) * interval``; each start moves
        ``tat`` one interval on. A start that would have to wait past ``deadline`` takes
        no token and is rejected at once."""
        rate = self.limits.rate
        if rate is None:
            return
        interval = 1.0 / rate
        if self.limits.scope == "node":
            allow_at = await asyncio.to_thread(self._reserve_node, interval, deadline)
        else:
            with self._lock:
                allow_at = self._reserve(self._tat, interval, deadline)
                if allow_at is not None:
                    self._tat = max(self._tat, time.monotonic()) + interval
        if allow_at is None:
            raise self._reject(f"over {rate:g} starts/s")
        delay = allow_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay + random.uniform(0, self.limits.jitter * interval))

    def _reserve(self, tat: float, interval: float, deadline: float) -> float | None:
        allow_at = max(time.monotonic(), tat - (self.limits.burst - 1) * interval)
        return None if allow_at > deadline else allow_at

    def _reserve_node(self, interval: float, deadline: float) -> float | None:
        """The bucket's ``tat`` lives in a file (8 bytes; ``time.monotonic`` is one clock
        for every process of a Linux machine), updated under its ``flock``."""
        self._dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._dir / "bucket", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = os.pread(fd, 8, 0)
            tat = struct.unpack("d", data)[0] if len(data) == 8 else 0.0
            allow_at = self._reserve(tat, interval, deadline)
            if allow_at is not None:
                os.pwrite(fd, struct.pack("d", max(tat, time.monotonic()) + interval), 0)
            return allow_at
        finally:
            os.close(fd)

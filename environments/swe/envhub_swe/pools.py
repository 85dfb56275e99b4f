"""Warm sandbox pools shared by every SWE episode of the process.

A new environment instance serves each episode, and episodes come from many event
loops (``asyncio.run`` per test, a server loop, a rollout loop), while a
``SandboxPool`` belongs to the loop that started it. So the pools live on one daemon
loop thread, started by the first :func:`acquire`; episodes acquire and release through
it. :func:`shutdown` closes every pool and stops the thread, so no container or sandbox
directory outlives the environment: ``SweEnv.aclose_shared`` calls it (the
``Environment`` lifecycle: ``LocalEnvironment.aclose``, ``envhub check``/``rollout``
finishing, ``envhub serve`` shutting down). There is no exit hook; ``envhub sandbox gc``
reaps what a process that skipped the lifecycle (or was SIGKILLed) left.
"""

from __future__ import annotations

import asyncio
import threading

from envhub.runtime.loop_thread import LoopThread
from envhub.sandboxes import Sandbox, SandboxPool, SandboxSpec

__all__ = ["acquire", "release", "shutdown"]


class _Runtime(LoopThread):
    """The pools' loop thread, with the pools and the pool of each sandbox handed out."""

    def __init__(self) -> None:
        super().__init__("envhub-swe-pools")
        self.pools: dict[tuple[str, str, int], SandboxPool] = {}
        self.owner: dict[int, SandboxPool] = {}

    def pool(self, spec: SandboxSpec, backend: str, min_idle: int, max_total: int) -> SandboxPool:
        key = (backend, spec.model_dump_json(), min_idle)  # specs hold a dict: not hashable
        pool = self.pools.get(key)
        if pool is None:
            tag = spec.image.rsplit("/", 1)[-1].replace(":", "-")
            pool = SandboxPool(
                spec, backend, min_idle=min_idle, max_total=max_total, name=f"swe-{tag}"
            )
            self.pools[key] = pool
        return pool


_lock = threading.Lock()
_runtime: _Runtime | None = None


def _get_runtime() -> _Runtime:
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = _Runtime()
        return _runtime


async def acquire(
    spec: SandboxSpec,
    backend: str,
    *,
    min_idle: int = 2,
    max_total: int = 64,
    timeout: float = 300.0,
) -> Sandbox:
    """A fresh started sandbox from the warm pool of ``(backend, spec)``."""
    rt = _get_runtime()

    async def take() -> Sandbox:
        pool = rt.pool(spec, backend, min_idle, max_total)
        sb = await pool.acquire(timeout)
        rt.owner[id(sb)] = pool
        return sb

    return await rt.run(take())


async def release(sandbox: Sandbox) -> None:
    """Destroy a sandbox that :func:`acquire` returned (never reused)."""
    rt = _get_runtime()

    async def give() -> None:
        pool = rt.owner.pop(id(sandbox), None)
        if pool is not None:
            await pool.release(sandbox)
        else:
            await sandbox.close()

    await rt.run(give())


def shutdown(timeout: float = 60.0) -> None:
    """Close every pool (idle and in-use sandboxes are destroyed) and stop the thread.
    Safe to call repeatedly; the next episode starts a new runtime."""
    global _runtime
    with _lock:
        rt, _runtime = _runtime, None
    if rt is None:
        return

    async def close_all() -> None:
        await asyncio.gather(*(p.close() for p in rt.pools.values()), return_exceptions=True)

    try:
        rt.call(close_all(), timeout)
    finally:
        rt.stop()

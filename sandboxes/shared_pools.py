"""Warm sandbox pools shared by every episode of the process, per environment.

A new environment instance serves each episode, and episodes come from many event
loops (``asyncio.run`` per test, a server loop, a rollout loop), while a
``SandboxPool`` belongs to the loop that started it. So the pools live on one daemon
loop thread, started by the first :func:`acquire`; episodes acquire and release through
it. Each pool belongs to a ``group`` (the environment's name), so one environment's
:func:`shutdown` closes its own pools and leaves another's in-use sandboxes alone; the
thread stops once no group is left. An environment calls ``shutdown(group)`` from its
``aclose_shared`` (the ``Environment`` lifecycle: ``LocalEnvironment.aclose``, ``envhub
check``/``rollout`` finishing, ``envhub serve`` shutting down), so no container or
sandbox directory outlives it. There is no exit hook; ``envhub sandbox gc`` reaps what a
process that skipped the lifecycle (or was SIGKILLed) left.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from envhub.runtime.loop_thread import LoopThread
from envhub.sandboxes.base import Sandbox, SandboxSpec
from envhub.sandboxes.pool import SandboxPool

__all__ = ["acquire", "release", "shutdown"]


class _Runtime(LoopThread):
    """The pools' loop thread: the pools by group, the pool of each sandbox handed out,
    and the releases still running in the background."""

    def __init__(self) -> None:
        super().__init__("envhub-sandbox-pools")
        self.pools: dict[tuple[str, str, str, int, str], SandboxPool] = {}
        self.owner: dict[int, SandboxPool] = {}
        self.releasing: set[asyncio.Task[None]] = set()

    def pool(
        self, group: str, spec: SandboxSpec, backend: str, min_idle: int, max_total: int,
        options: dict[str, Any],
    ) -> SandboxPool:  # fmt: skip
        # specs hold a dict: not hashable
        key = (group, backend, spec.model_dump_json(), min_idle, repr(sorted(options.items())))
        with _lock:  # shutdown() takes a group's pools out from another thread
            pool = self.pools.get(key)
            if pool is not None:
                return pool
            tag = spec.image.rsplit("/", 1)[-1].replace(":", "-")
            pool = SandboxPool(
                spec, backend, min_idle=min_idle, max_total=max_total, name=f"{group}-{tag}",
                **options,
            )  # fmt: skip
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
    group: str,
    min_idle: int = 2,
    max_total: int = 64,
    timeout: float = 300.0,
    **options: Any,
) -> Sandbox:
    """A fresh started sandbox from ``group``'s warm pool of ``(backend, spec, options)``
    (``options``: the backend's own, as for :func:`~envhub.sandboxes.make_sandbox`)."""
    rt = _get_runtime()

    async def take() -> Sandbox:
        pool = rt.pool(group, spec, backend, min_idle, max_total, options)
        sb = await pool.acquire(timeout)
        rt.owner[id(sb)] = pool
        return sb

    return await rt.run(take())


async def release(sandbox: Sandbox, *, wait: bool = True) -> None:
    """Destroy a sandbox that :func:`acquire` returned (never reused). ``wait=False``
    returns at once and destroys it in the background, off the episode's critical path;
    :func:`shutdown` still waits for it."""
    rt = _get_runtime()

    async def give() -> None:
        pool = rt.owner.pop(id(sandbox), None)
        if pool is not None:
            await pool.release(sandbox)
        else:
            await sandbox.close()

    if wait:
        await rt.run(give())
        return

    def start() -> None:
        task = rt.loop.create_task(give())
        rt.releasing.add(task)
        task.add_done_callback(rt.releasing.discard)

    rt.loop.call_soon_threadsafe(start)


def shutdown(group: str | None = None, timeout: float = 60.0) -> None:
    """Close ``group``'s pools (every group's when ``None``): idle and in-use sandboxes
    are destroyed, background releases finish. The thread stops once no pool is left.
    Safe to call repeatedly; the next episode starts a new runtime."""
    global _runtime
    with _lock:
        rt = _runtime
        if rt is None:
            return
        mine = [k for k in rt.pools if group is None or k[0] == group]
        closing = [rt.pools.pop(k) for k in mine]
        last = not rt.pools
        if last:
            _runtime = None

    async def close_all() -> None:
        await asyncio.gather(*(p.close() for p in closing), return_exceptions=True)
        if last:
            await asyncio.gather(*list(rt.releasing), return_exceptions=True)

    try:
        rt.call(close_all(), timeout)
    finally:
        if last:
            rt.stop()

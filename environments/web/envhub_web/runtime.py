"""One background event loop per process for the shared web services.

The MiniShop server (uvicorn) and the Playwright browser pool are started once per
process and shared by all sessions. Playwright objects are bound to the loop that
created them, while sessions may come from many loops (``asyncio.run`` per test, a
server loop, a rollout loop), so both services live on this dedicated loop thread and
sessions reach them through :meth:`Runtime.run`; the first session starts the runtime.
``shutdown()`` stops the browsers and the servers, so no Chromium process outlives the
environment: the web environments' ``aclose_shared`` calls it (the ``Environment``
lifecycle: ``LocalEnvironment.aclose``, ``envhub check``/``rollout`` finishing,
``envhub serve`` shutting down). There is no exit hook.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from envhub.runtime.loop_thread import LoopThread
from envhub_web.procs import chromium_pids

__all__ = ["Runtime", "add_shutdown_hook", "runtime", "shutdown"]

T = TypeVar("T")


class Runtime(LoopThread):
    """The web services' loop thread, with the services started on it."""

    def __init__(self) -> None:
        super().__init__("envhub-web-runtime")
        #: shared services started on this loop (sites, browser pool), by key
        self.services: dict[Any, concurrent.futures.Future[Any]] = {}
        self.services_lock = threading.Lock()

    async def service(self, key: Any, start: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """The service under ``key``, started once on this loop by ``start()``.

        Concurrent first callers share one start; a failed start is retried next time.
        """
        with self.services_lock:
            future = self.services.get(key)
            if future is None or (future.done() and future.exception() is not None):
                future = asyncio.run_coroutine_threadsafe(start(), self.loop)
                self.services[key] = future
        return await asyncio.wrap_future(future)


_lock = threading.Lock()
_runtime: Runtime | None = None
_hooks: list[Callable[[], Awaitable[None]]] = []


def runtime() -> Runtime:
    """The process's runtime, started on first use."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = Runtime()
        return _runtime


def add_shutdown_hook(hook: Callable[[], Awaitable[None]]) -> None:
    """Register a coroutine function that :func:`shutdown` awaits on the runtime loop."""
    with _lock:
        _hooks.append(hook)


def shutdown(timeout: float = 30.0) -> None:
    """Stop every shared service (browsers first, then servers) and the loop thread,
    and wait until no Chromium process of ours is left.

    Safe to call repeatedly; the next session starts everything again.
    """
    global _runtime
    with _lock:
        current, _runtime = _runtime, None
        hooks = list(reversed(_hooks))
        _hooks.clear()
    if current is None:
        return

    async def run_hooks() -> None:
        for hook in hooks:
            try:
                await hook()
            except Exception:
                pass

    try:
        current.call(run_hooks(), timeout)
    finally:
        current.stop()
    # Chromium's helper processes exit shortly after the browser; wait, so that callers
    # (and leak checks) see a clean process tree when this returns.
    deadline = time.monotonic() + timeout
    while chromium_pids() and time.monotonic() < deadline:
        time.sleep(0.05)

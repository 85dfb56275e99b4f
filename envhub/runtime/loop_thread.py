"""An asyncio event loop running in a daemon thread, reachable from any other loop.

Several parts of envhub hold objects bound to one event loop (a ``SandboxPool``, a
Playwright browser, a uvicorn server) while their callers come from many loops
(``asyncio.run`` per test, a server loop, a rollout loop) or from blocking code. They
keep those objects on a :class:`LoopThread` and reach them through :meth:`LoopThread.run`
(from async code) or :meth:`LoopThread.call` (from blocking code). A uvicorn server among
them starts with :func:`serve_in_loop` (on the loop it then belongs to).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from envhub._util.asgi import serve_in_loop as serve_in_loop

__all__ = ["LoopThread", "serve_in_loop"]

_T = TypeVar("_T")


class LoopThread:
    """A daemon thread running its own event loop until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro`` on this loop from any other loop (cancellation propagates)."""
        if self.in_loop():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def call(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        """Blocking variant of :meth:`run` for synchronous callers; Ctrl-C while waiting
        cancels the coroutine instead of leaving it running in the background."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except KeyboardInterrupt:
            future.cancel()
            raise

    def stop(self) -> None:
        """Stop the loop and join the thread (the loop is closed once it has stopped)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()

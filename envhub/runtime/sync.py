"""Blocking flavour of sessions for scripts, notebooks and the gymnasium adapter.

All coroutines run on one private event loop in a daemon thread, so blocking callers
never nest event loops and async environments keep working unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.runtime.loop_thread import LoopThread
from envhub.types import CloseResult, SessionStart, StepResult, ToolCall

__all__ = ["SyncSession", "run_sync", "sync_session"]

T = TypeVar("T")
_loop: LoopThread | None = None
_loop_lock = threading.Lock()


def run_sync(awaitable: Awaitable[T]) -> T:
    """Run a coroutine or other awaitable (such as ``env.open(task_id)``, an
    :class:`~envhub.protocol.OpeningSession`) on envhub's background loop and wait for
    its result."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = LoopThread("envhub-sync")
    return _loop.call(_awaited(awaitable))


async def _awaited(awaitable: Awaitable[T]) -> T:
    """A coroutine for the loop thread, which schedules only coroutines."""
    return await awaitable


class SyncSession:
    """``reset`` / ``step`` / ``close`` that block, over any
    :class:`~envhub.protocol.EnvironmentClient` (in-process, a server, a pool, a fleet)."""

    def __init__(
        self, env: EnvironmentClient, task_id: str | None = None, seed: int | None = None
    ) -> None:
        self._env = env
        self._task_id = task_id
        self._seed = seed
        self.session: SessionHandle | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """No episode is open: none was started, or the last one was closed."""
        return self.session is None or self._closed

    def reset(self, task_id: str | None = None, seed: int | None = None) -> SessionStart:
        """Start a new episode (aborting any unfinished previous one)."""
        if not self.closed:
            assert self.session is not None
            run_sync(self.session.abort())
        self.session = None
        self.session = run_sync(self._env.open(
            task_id if task_id is not None else self._task_id,
            seed=seed if seed is not None else self._seed,
        ))  # fmt: skip
        self._closed = False
        return run_sync(self.session.reset())

    def step(
        self, tool_calls: Sequence[ToolCall | dict[str, Any]], content: str | None = None
    ) -> StepResult:
        return run_sync(self._require().step(tool_calls, content))

    def close(self) -> CloseResult:
        result = run_sync(self._require().close())
        self._closed = True
        return result

    def _require(self) -> SessionHandle:
        if self.session is None:
            self.reset()
        assert self.session is not None
        return self.session

    def __enter__(self) -> SyncSession:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.closed:
            self.close()


def sync_session(
    env: str, task_id: str | None = None, *, seed: int | None = None, **kwargs: Any
) -> SyncSession:
    """A blocking in-process session: ``s = envhub.sync_session("calc"); s.reset(); ...``.

    ``kwargs`` are the same as :func:`envhub.make` (budgets and environment options).
    """
    from envhub.clients.local import make

    return SyncSession(make(env, **kwargs), task_id, seed)

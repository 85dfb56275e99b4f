"""The seam every transport plugs into: :class:`EnvironmentClient` and :class:`SessionHandle`.

An environment is reached in-process (:class:`envhub.LocalEnvironment`), over HTTP or
WebSocket (:class:`envhub.RemoteEnvironment`), and later through a Ray fleet or MCP. The
rollout engine, ``stream``, ``check``, the trainer adapters, the gymnasium adapter and the
CLI are typed against these two protocols only, so any implementation works with all of
them; :func:`envhub.testing.check_client_conformance` checks an implementation's behaviour.

Everything here is async: a transport that can answer without I/O still answers through a
coroutine, so callers never test which kind of client they hold.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar, runtime_checkable

from envhub.task import Task
from envhub.types import (
    CloseResult,
    EnvironmentInfo,
    SessionInfo,
    SessionStart,
    StepResult,
    ToolCall,
)

__all__ = ["ClosingOnExit", "EnvironmentClient", "OpeningSession", "SessionHandle"]


@runtime_checkable
class SessionHandle(Protocol):
    """One episode on some transport: ``reset`` -> ``step``* -> ``close``.

    ``reset`` and ``close`` are idempotent (a repeat returns the first answer); ``step``
    after the episode ended or after ``close`` raises :class:`envhub.errors.SessionClosed`;
    ``abort`` frees the episode's resources without scoring and never raises for a session
    that is already gone, and ``close`` after ``abort`` raises ``SessionClosed`` (an
    aborted episode has no result; a session closed before the abort keeps its result).
    Used as ``async with``, a clean exit closes (scores) and an exception aborts.

    Every transport refuses what the HTTP API refuses, with
    :class:`envhub.errors.InvalidRequest` worded as the server words it
    (:mod:`envhub.runtime.validation`): a client-chosen ``session_id`` outside
    :data:`envhub.types.SESSION_ID_PATTERN`, a step whose calls or ``request_id`` fail
    :class:`envhub.types.StepRequest`; a refused step changes nothing (no turn counted).
    """

    @property
    def session_id(self) -> str: ...

    @property
    def served_by(self) -> str | None:
        """Where the session runs: ``None`` in-process, the server's URL over HTTP or
        WebSocket, the replica's id in a pool or fleet (recorded on the trajectory)."""
        ...

    async def reset(self) -> SessionStart: ...

    async def step(
        self,
        tool_calls: Sequence[ToolCall | dict[str, Any]],
        content: str | None = None,
        request_id: str | None = None,
    ) -> StepResult: ...

    async def close(self) -> CloseResult: ...

    async def abort(self) -> None: ...

    async def info(self) -> SessionInfo: ...

    async def fork(
        self, n: int = 1, *, fork_id: str | None = None
    ) -> Sequence[SessionHandle]:
        """``n`` children of the episode as it stands, each a session of its own: the
        environment's state, the tools in force, the turns, budgets used and metrics so
        far, on the same server (or replica) as this one; then each goes its own way, and
        closing any of them (this one included) leaves the others as they are.

        A closed, aborted or ended session raises :class:`envhub.errors.SessionClosed`;
        an environment whose fork by replay does not reproduce the episode raises
        :class:`envhub.errors.NotDeterministic`; a server that cannot hold ``n`` more
        sessions raises :class:`envhub.errors.CapacityError`. ``n`` outside
        ``1..``:data:`~envhub.types.MAX_FORK` or a malformed ``fork_id`` is an
        :class:`envhub.errors.InvalidRequest`. Repeating a ``fork_id`` returns the same
        children (remote transports send one of their own when none is given, so a
        retried fork never doubles them).
        """
        ...

    async def __aenter__(self) -> SessionHandle: ...

    async def __aexit__(self, *exc: object) -> None: ...


@runtime_checkable
class EnvironmentClient(Protocol):
    """One environment (with one option set) reachable through some transport.

    ``open`` returns an :class:`OpeningSession`: awaited, a started session; used with
    ``async with``, a started session that is closed (scored) on exit. An unknown
    task raises :class:`envhub.errors.TaskNotFound`-style :class:`envhub.errors.EnvhubError`
    subclasses exactly as the server maps them. ``task`` gives the full task where the
    transport can (in-process); remote transports raise :class:`NotImplementedError`.
    ``aclose`` releases the client's connections and any process-wide resources it owns.
    """

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    async def info(self) -> EnvironmentInfo: ...

    async def task_ids(self, split: str | None = None) -> list[str]: ...

    async def task(self, task_id: str) -> Task: ...

    def open(
        self,
        task_id: str | None = None,
        *,
        session_id: str | None = None,
        seed: int | None = None,
    ) -> OpeningSession: ...

    async def aclose(self) -> None: ...


class _Closable(Protocol):
    async def close(self) -> object: ...

    async def abort(self) -> None: ...


_S = TypeVar("_S", bound=_Closable)


class ClosingOnExit:
    """``async with session:`` as every :class:`SessionHandle` does it, for implementations
    to inherit: entering gives the session, a clean exit closes (scores) it and an
    exception aborts it."""

    async def __aenter__(self: _S) -> _S:
        return self

    async def __aexit__(self: _Closable, *exc: object) -> None:  # (type, value, traceback)
        if exc[0] is None:
            await self.close()
        else:
            await self.abort()


class OpeningSession:
    """What :meth:`EnvironmentClient.open` returns: awaitable and an async context manager.

    ``session = await env.open(task_id)`` starts a session the caller must close or abort;
    ``async with env.open(task_id) as session:`` closes (scores) it on a clean exit and
    aborts it when the block raises. Every client shares this one implementation, built
    from a coroutine function that creates and starts the session.
    """

    __slots__ = ("_session", "_start")

    def __init__(self, start: Callable[[], Awaitable[SessionHandle]]) -> None:
        self._start = start
        self._session: SessionHandle | None = None

    def __await__(self) -> Generator[Any, None, SessionHandle]:
        return self._start().__await__()

    async def __aenter__(self) -> SessionHandle:
        self._session = await self._start()
        return self._session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        if exc_type is None:
            await session.close()
        else:
            await session.abort()

"""``RemoteEnvironment``: sessions on an ``envhub serve`` server, as an
:class:`~envhub.protocol.EnvironmentClient`.

``await env.open(task_id)`` returns a :class:`RemoteSession`, a
:class:`~envhub.protocol.SessionHandle` like the in-process
:class:`~envhub.runtime.session.Session`, so rollouts and adapters run against either. The HTTP
engine is aiohttp when installed, else httpx (:mod:`envhub.clients._http_transports` says why);
retries, error mapping and the two session transports are in :mod:`envhub.clients._remote_calls`.

``transport="ws"`` (the default, as for ``envhub rollout --env-url``) sends a session's
create, steps and close over a WebSocket (``/v1/ws``, aiohttp only) leased from a pool
for the session's life and reused by the next session: no HTTP request per call and no
handshake per episode, so less CPU per step on both sides (about 1.6x HTTP's throughput
at 256 sessions, see docs/benchmarks.md). Without aiohttp (or with
``http="httpx"``) the default is HTTP.

The connection pool is not capped by default: it holds one connection per call in
flight, so it is as large as the concurrency its user runs, never a queue in front of
the server. ``max_connections`` caps it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from envhub.clients._http_transports import AiohttpTransport, HttpEngine, make_transport
from envhub.clients._remote_calls import (
    HttpSessions,
    Requests,
    SessionCalls,
    Sessions,
    WebSocketSessions,
)
from envhub.errors import EnvhubError, SessionClosed
from envhub.protocol import ClosingOnExit, OpeningSession
from envhub.runtime.cleanup import record_cleanup_failure
from envhub.runtime.validation import fork_request, step_request
from envhub.task import Task
from envhub.types import (
    CloseResult,
    EnvironmentInfo,
    Health,
    Message,
    SessionInfo,
    SessionStart,
    StepResult,
    TaskPage,
    ToolCall,
)

__all__ = ["DEFAULT_TRANSPORT", "RemoteEnvironment", "RemoteSession", "SessionTransport"]

SessionTransport = Literal["http", "ws"]
DEFAULT_TRANSPORT: SessionTransport = "ws"
_TASK_PAGE = 10_000


class RemoteSession(ClosingOnExit):
    """One episode on the server, a :class:`~envhub.protocol.SessionHandle`.

    It holds the :class:`~envhub.clients._remote_calls.SessionCalls` its create handed back (HTTP
    requests or the session's WebSocket), and the start: ``task_id``, ``messages`` and
    ``tools`` (the tools in force, which a user turn may change) are known without a call.
    """

    def __init__(self, start: SessionStart, calls: SessionCalls, served_by: str) -> None:
        self.start = start
        self.session_id = start.session_id
        self.served_by: str | None = served_by
        self.task_id = start.task_id
        self.messages: list[Message] = start.messages
        self.tools: list[dict[str, Any]] = start.tools
        self.done = False
        self.closed = False
        self.stop_reason: str | None = None
        self._aborted = False
        self._calls = calls

    async def reset(self) -> SessionStart:
        """The session's start (it was reset on the server when it was opened)."""
        return self.start

    async def step(
        self,
        tool_calls: Sequence[ToolCall | dict[str, Any]],
        content: str | None = None,
        request_id: str | None = None,
    ) -> StepResult:
        """One assistant turn; safe to retry, since it always carries a ``request_id``. A
        turn the server would refuse is refused here, in its words, without a call."""
        result = await self._calls.step(
            step_request(tool_calls, content, request_id or uuid.uuid4().hex)
        )
        if result.done:
            self.done, self.stop_reason = True, result.stop_reason
        if result.tools is not None:  # a user turn changed them
            self.tools = result.tools
        return result

    async def fork(self, n: int = 1, *, fork_id: str | None = None) -> list[RemoteSession]:
        """``n`` children on the server holding this session (``POST .../fork``, or
        ``fork`` over the socket); safe to retry, since it always carries a ``fork_id``.
        Each child knows this session's start and the tools in force, as this one does."""
        request = fork_request(n, fork_id or uuid.uuid4().hex)
        children = []
        for session_id, calls in await self._calls.fork(request):
            start = self.start.model_copy(update={"session_id": session_id})
            child = RemoteSession(start, calls, self.served_by or "")  # always the URL
            child.tools = self.tools
            children.append(child)
        return children

    async def close(self) -> CloseResult:
        """Score the episode on the server; closing again returns the same result. After
        :meth:`abort`, :class:`~envhub.errors.SessionClosed`, as in-process (whatever the
        abort's close on the server scored is not a result the caller asked for)."""
        if self._aborted:
            raise SessionClosed(f"session {self.session_id} was aborted, not scored")
        result = await self._calls.close()
        self.closed, self.stop_reason = True, result.stop_reason
        return result

    async def abort(self) -> None:
        """Free the server session now. The API has no unscored delete, so on the server
        this is a close (the reward runs; its result is dropped, and a later
        :meth:`close` raises :class:`~envhub.errors.SessionClosed`); if it fails (logged and
        counted, :mod:`envhub.runtime.cleanup`), the server's idle reaper frees the session."""
        if not self.closed:
            self.closed = self._aborted = True
            try:
                await self._calls.close()
            except EnvhubError as exc:
                record_cleanup_failure("RemoteSession.abort", exc)

    async def info(self) -> SessionInfo:
        return await self._calls.info()

    async def forget(self) -> None:
        """Drop a session whose server is gone (a pool's lost replica): no call is made,
        the connection goes back to the pool; like :meth:`abort`, :meth:`close` then
        raises :class:`~envhub.errors.SessionClosed`."""
        self.closed = self._aborted = True
        await self._calls.release()


class RemoteEnvironment:
    """An environment hosted by ``envhub serve`` at ``url``, opened with ``options``: an
    :class:`~envhub.protocol.EnvironmentClient`.

    One connection pool serves all sessions, one request in flight per connection; by
    default it grows to the calls in flight (the caller's concurrency), ``max_connections``
    caps it. ``http`` picks the engine: ``"auto"`` (aiohttp if installed, else httpx),
    ``"aiohttp"``, ``"httpx"``. ``transport``: ``"ws"`` (the default with aiohttp) sends
    every session call over pooled WebSockets (see above); a session's calls then stay on
    the connection, and so on the replica, its create reached. ``"http"`` (the default
    without aiohttp) sends one request per call. Calls that fail to connect, and HTTP
    502/503/504 answers, are retried ``retries`` times, backing off from ``backoff_s``.
    """

    def __init__(
        self,
        url: str,
        env: str,
        options: dict[str, Any] | None = None,
        token: str | None = None,
        timeout: float = 120.0,
        max_connections: int | None = None,
        retries: int = 3,
        backoff_s: float = 0.25,
        http: HttpEngine = "auto",
        transport: SessionTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.name = env
        self.options = dict(options or {})
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        if transport == "ws" and http == "httpx":
            raise ValueError('transport="ws" runs on aiohttp; use http="auto" or "aiohttp"')
        if transport not in ("http", "ws", None):
            raise ValueError(f'transport must be "http" or "ws", not {transport!r}')
        if max_connections is not None and max_connections < 1:
            raise ValueError(f"max_connections must be >= 1 or None, not {max_connections}")
        engine = make_transport(http, self.url, headers, timeout, max_connections)
        over_aiohttp = isinstance(engine, AiohttpTransport)
        if transport is None:  # httpx has no WebSocket client
            transport = DEFAULT_TRANSPORT if over_aiohttp else "http"
        self.transport: SessionTransport = transport
        self._requests = Requests(self.url, engine, retries, backoff_s)
        self._sessions: Sessions
        if transport == "http":
            self._sessions = HttpSessions(self._requests)
        elif isinstance(engine, AiohttpTransport):
            self._sessions = WebSocketSessions(engine, retries, backoff_s, keep=max_connections)
        else:
            raise ImportError('transport="ws" needs aiohttp installed')
        self._info: EnvironmentInfo | None = None

    @property
    def version(self) -> str:
        """The hosted environment's version as of the last :meth:`info` (``"unknown"``
        before the first); read ``(await env.info()).version`` for the server's answer."""
        return self._info.version if self._info is not None else "unknown"

    def open(
        self,
        task_id: str | None = None,
        *,
        session_id: str | None = None,
        seed: int | None = None,
    ) -> OpeningSession:
        """Create and start a session (``POST /v1/sessions``, or ``create`` over the
        socket); ``await`` it, or use it as ``async with`` to close it on exit."""
        return OpeningSession(lambda: self._create(task_id, session_id, seed))

    async def _create(
        self, task_id: str | None, session_id: str | None, seed: int | None
    ) -> RemoteSession:
        start, calls = await self._sessions.create({
            "env": self.name,
            "task_id": task_id,
            "seed": seed,
            "options": self.options or None,
            "session_id": uuid.uuid4().hex if session_id is None else session_id,
        })
        return RemoteSession(start, calls, self.url)

    async def task_ids(self, split: str | None = None) -> list[str]:
        """All task ids of a split of the hosted option set (fetched page by page)."""
        ids: list[str] = []
        path = f"/v1/environments/{self.name}/tasks"
        while True:
            params: dict[str, Any] = {"offset": len(ids), "limit": _TASK_PAGE}
            if split is not None:
                params["split"] = split
            page = await self._requests.call("GET", path, TaskPage, params=params)
            ids.extend(page.task_ids)
            if not page.task_ids or len(ids) >= page.total:
                return ids

    async def task(self, task_id: str) -> Task:
        """Not available remotely: the server publishes task ids and each session's first
        messages, never a task's gold data. Raises :class:`NotImplementedError`."""
        raise NotImplementedError(
            f"{self.url} does not publish tasks; a remote environment gives task ids "
            "(task_ids) and each session's first messages"
        )

    async def info(self) -> EnvironmentInfo:
        """Name, version, tool schemas, task count, splits, options, budgets and the
        server's pins (its plugin's distribution and version, its task set's hash).

        The server describes its hosted option set; with client ``options`` the sessions
        draw from another task set, whose hash the server does not report, so
        ``task_set_hash`` is ``None`` then rather than the hosted set's."""
        info = await self._requests.call("GET", f"/v1/environments/{self.name}", EnvironmentInfo)
        if self.options:
            info = info.model_copy(update={"task_set_hash": None})
        self._info = info
        return info

    async def health(self) -> Health:
        """The server's liveness and load (``GET /health``)."""
        return await self._requests.call("GET", "/health", Health)

    async def aclose(self) -> None:
        await self._sessions.aclose()
        await self._requests.aclose()

    async def __aenter__(self) -> RemoteEnvironment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


if TYPE_CHECKING:  # the protocols, checked statically against this implementation
    from envhub.protocol import EnvironmentClient, SessionHandle

    _client: type[EnvironmentClient] = RemoteEnvironment
    _session: type[SessionHandle] = RemoteSession

"""``RemoteEnvironment``: sessions on an ``envhub serve`` server, with the local surface.

``await env.open(task_id)`` returns a :class:`RemoteSession` with the same ``step`` /
``close`` / ``abort`` as an in-process :class:`~envhub.session.Session`, so rollouts
and adapters run against either. Differences: ``task_ids()`` and ``info()`` are
coroutines here (they are HTTP calls). The HTTP engine is aiohttp when installed, else
httpx (:mod:`envhub._http_transports` says why).

Every call is made idempotent and then retried on connection errors and 502/503/504
(with backoff): creates carry a client-generated ``session_id``, steps an auto-generated
``request_id``, and close is idempotent on the server. Error bodies become the matching
:mod:`envhub.errors` exception (``SessionNotFound``, ``CapacityError``, ...) with the
HTTP ``status`` attached, or :class:`~envhub.errors.RemoteError` for other codes.

``transport="ws"`` (the default, as for ``envhub rollout --env-url``) sends a session's
create, steps and close over a WebSocket (``/v1/ws``, aiohttp only) leased from a pool
for the session's life and reused by the next session: no HTTP request per call and no
handshake per episode, so less CPU per step on both sides (about 1.6x HTTP's throughput
at 256 sessions, see the README's benchmarks). A dropped socket is reopened and the
message resent (all calls are idempotent as above); error replies raise the same
exceptions as HTTP. Without aiohttp (or with ``http="httpx"``) the default is HTTP.

The connection pool is not capped by default: it holds one connection per call in
flight, so it is as large as the concurrency its user runs, never a queue in front of
the server. ``max_connections`` caps it.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from envhub._http_transports import (
    AiohttpTransport,
    HttpEngine,
    SocketPool,
    TransportFailure,
    WebSocketChannel,
    WebSocketRefused,
    make_transport,
)
from envhub.cleanup import record_cleanup_failure
from envhub.errors import (
    CapacityError,
    EnvhubError,
    InvalidRequest,
    RegistryError,
    RemoteError,
    SandboxError,
    SessionClosed,
    SessionNotFound,
    TaskNotFound,
    Unauthorized,
)
from envhub.types import CloseResult, Message, SessionInfo, SessionStart, StepResult, ToolCall

__all__ = ["DEFAULT_TRANSPORT", "RemoteEnvironment", "RemoteSession", "SessionTransport"]

M = TypeVar("M", bound=BaseModel)
SessionTransport = Literal["http", "ws"]
DEFAULT_TRANSPORT: SessionTransport = "ws"
WS_PATH = "/v1/ws"

_ERRORS_BY_CODE: dict[str, type[EnvhubError]] = {
    "invalid_request": InvalidRequest,
    "unknown_environment": RegistryError,
    "unknown_task": TaskNotFound,
    "session_not_found": SessionNotFound,
    "session_closed": SessionClosed,
    "capacity": CapacityError,
    "sandbox_error": SandboxError,
    "unauthorized": Unauthorized,
}
_RETRY_STATUSES = frozenset({502, 503, 504})


def _error_json(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def _error_from(status: int, body: bytes, where: str) -> EnvhubError:
    """The envhub exception for an error answer (``status`` set on every one)."""
    try:
        detail = json.loads(body)["error"]
        code, message = str(detail["code"]), str(detail["message"])
    except (ValueError, KeyError, TypeError):  # not an envhub body (a proxy, a crash page)
        code = f"http_{status}"
        message = body[:500].decode("utf-8", "replace") or f"HTTP {status}"
    cls = _ERRORS_BY_CODE.get(code)
    if cls is None:
        return RemoteError(f"{where}: {message}", code=code, status=status)
    error = cls(message)
    error.status = status  # type: ignore[attr-defined]
    return error


class RemoteSession:
    """One episode on the server; mirrors :class:`envhub.session.Session`.

    With ``transport="ws"`` it holds the socket its create went over until it is closed;
    calls after that borrow one from the pool for the call.
    """

    def __init__(
        self, env: RemoteEnvironment, start: SessionStart, socket: WebSocketChannel | None = None
    ) -> None:
        self._env = env
        self.start = start
        self.session_id = start.session_id
        self.task_id = start.task_id
        self.messages: list[Message] = start.messages
        self.tools: list[dict[str, Any]] = start.tools
        self.done = False
        self.closed = False
        self.stop_reason: str | None = None
        self._socket = socket
        self._socket_lock = asyncio.Lock()  # one message in flight per socket

    async def reset(self) -> SessionStart:
        """The session's start (it was reset on the server when it was opened)."""
        return self.start

    async def step(
        self,
        tool_calls: list[ToolCall | dict[str, Any]],
        content: str | None = None,
        request_id: str | None = None,
    ) -> StepResult:
        """One assistant turn; safe to retry, since it always carries a ``request_id``."""
        body = {
            "tool_calls": [c.model_dump() if isinstance(c, ToolCall) else c for c in tool_calls],
            "content": content,
            "request_id": request_id or uuid.uuid4().hex,
        }
        if self._env.transport == "ws":
            result = await self._over_ws(StepResult, "step", body)
        else:
            result = await self._env._call(
                "POST", f"/v1/sessions/{self.session_id}/step", StepResult, body, self.session_id
            )
        if result.done:
            self.done, self.stop_reason = True, result.stop_reason
        return result

    async def close(self) -> CloseResult:
        """Score the episode on the server; closing again returns the same result."""
        if self._env.transport == "ws":
            try:
                result = await self._over_ws(CloseResult, "close")
            finally:
                socket, self._socket = self._socket, None
                if socket is not None:
                    await self._env._sockets.release(socket)
        else:
            result = await self._env._call(
                "POST", f"/v1/sessions/{self.session_id}/close", CloseResult, None,
                self.session_id,
            )
        self.closed, self.stop_reason = True, result.stop_reason
        return result

    async def _over_ws(self, model: type[M], op: str, body: dict[str, Any] | None = None) -> M:
        message = {"op": op, "session_id": self.session_id, **(body or {})}
        async with self._socket_lock:
            if self._socket is not None:
                return await self._env._ws_call(self._socket, model, message)
        pool = self._env._sockets
        socket = pool.lease()
        try:
            return await self._env._ws_call(socket, model, message)
        finally:
            await pool.release(socket)

    async def abort(self) -> None:
        """Free the server session now, ignoring errors. Over HTTP this is a close (the API
        has no unscored delete); if it fails, the server's idle reaper frees the session."""
        if not self.closed:
            self.closed = True
            try:
                await self.close()
            except EnvhubError as exc:
                record_cleanup_failure("RemoteSession.abort", exc)

    async def info(self) -> SessionInfo:
        return await self._env._call(
            "GET", f"/v1/sessions/{self.session_id}", SessionInfo, None, self.session_id
        )

    async def __aenter__(self) -> RemoteSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is None:
            await self.close()
        else:
            await self.abort()


class RemoteEnvironment:
    """An environment hosted by ``envhub serve`` at ``url``, opened with ``options``.

    One connection pool serves all sessions, one request in flight per connection; by
    default it grows to the calls in flight (the caller's concurrency), ``max_connections``
    caps it. ``http`` picks the engine: ``"auto"`` (aiohttp if installed, else httpx),
    ``"aiohttp"``, ``"httpx"``. ``transport``: ``"ws"`` (the default with aiohttp) sends
    every session call over pooled WebSockets (see above); a session's calls then stay on
    the connection, and so on the replica, its create reached. ``"http"`` (the default
    without aiohttp) sends one request per call.
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
        self.retries = retries
        self.backoff_s = backoff_s
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        if transport == "ws" and http == "httpx":
            raise ValueError('transport="ws" runs on aiohttp; use http="auto" or "aiohttp"')
        if transport not in ("http", "ws", None):
            raise ValueError(f'transport must be "http" or "ws", not {transport!r}')
        if max_connections is not None and max_connections < 1:
            raise ValueError(f"max_connections must be >= 1 or None, not {max_connections}")
        self._transport = make_transport(http, self.url, headers, timeout, max_connections)
        over_aiohttp = isinstance(self._transport, AiohttpTransport)
        if transport is None:  # httpx has no WebSocket client
            transport = DEFAULT_TRANSPORT if over_aiohttp else "http"
        if transport == "ws" and not over_aiohttp:
            raise ImportError('transport="ws" needs aiohttp installed')
        self.transport = transport
        self._socket_pool: SocketPool | None = None
        if isinstance(self._transport, AiohttpTransport) and transport == "ws":
            self._socket_pool = SocketPool(self._transport, WS_PATH, keep=max_connections)

    async def open(
        self,
        task_id: str | None = None,
        *,
        seed: int | None = None,
        session_id: str | None = None,
    ) -> RemoteSession:
        """Create and start a session (``POST /v1/sessions``)."""
        session_id = session_id or uuid.uuid4().hex
        body = {
            "env": self.name,
            "task_id": task_id,
            "seed": seed,
            "options": self.options or None,
            "session_id": session_id,
        }
        if self.transport == "http":
            start = await self._call("POST", "/v1/sessions", SessionStart, body, session_id)
            return RemoteSession(self, start)
        socket = self._sockets.lease()
        try:
            start = await self._ws_call(socket, SessionStart, {"op": "create", **body})
        except BaseException:
            await asyncio.shield(self._sockets.release(socket))
            raise
        return RemoteSession(self, start, socket)

    @asynccontextmanager
    async def session(
        self, task_id: str | None = None, *, seed: int | None = None
    ) -> AsyncIterator[RemoteSession]:
        """``async with env.session(task_id) as s:`` opens, and closes (scoring) on exit."""
        session = await self.open(task_id, seed=seed)
        try:
            yield session
        finally:
            await session.close()

    async def task_ids(self, split: str | None = None) -> list[str]:
        """All task ids of a split of the hosted option set (fetched page by page)."""
        ids: list[str] = []
        while True:
            params: dict[str, Any] = {"offset": len(ids), "limit": 10_000}
            if split is not None:
                params["split"] = split
            path = f"/v1/environments/{self.name}/tasks"
            page = await self._call_json("GET", path, params=params)
            ids.extend(page["task_ids"])
            if not page["task_ids"] or len(ids) >= page["total"]:
                return ids

    async def info(self) -> dict[str, Any]:
        """Name, version, tool schemas, task count, splits, options and budgets."""
        return await self._call_json("GET", f"/v1/environments/{self.name}")

    async def health(self) -> dict[str, Any]:
        return await self._call_json("GET", "/health")

    async def aclose(self) -> None:
        if self._socket_pool is not None:
            await self._socket_pool.aclose()
        await self._transport.aclose()

    async def __aenter__(self) -> RemoteEnvironment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- transport -----------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        return self.backoff_s * 2**attempt * (0.5 + random.random())

    @property
    def _sockets(self) -> SocketPool:
        assert self._socket_pool is not None, 'only with transport="ws"'
        return self._socket_pool

    async def _ws_call(self, socket: WebSocketChannel, model: type[M],
                       message: dict[str, Any]) -> M:
        """One message over ``socket``, resent on a dropped connection (with backoff)."""
        content = json.dumps(message, separators=(",", ":")).encode()
        where = f"WS {socket.path} {message['op']}"
        for attempt in range(self.retries + 1):
            try:
                answer = await socket.exchange(content)
            except WebSocketRefused as exc:
                code = "unauthorized" if exc.status in (401, 403) else f"http_{exc.status}"
                raise _error_from(exc.status, _error_json(code, str(exc)), where) from exc
            except TransportFailure as exc:
                if attempt == self.retries:
                    raise RemoteError(f"{where} failed: {exc}", code="unreachable",
                                      status=0) from exc
                await asyncio.sleep(self._backoff(attempt))
                continue
            if answer.startswith(b'{"error":'):
                raise _error_from(int(json.loads(answer).get("status", 0)), answer, where)
            return model.model_validate_json(answer)
        raise AssertionError("unreachable")  # the loop always returns or raises

    async def _call(
        self, method: str, path: str, model: type[M], body: Any = None, affinity: str = ""
    ) -> M:
        return model.model_validate_json(await self._send(method, path, body, None, affinity))

    async def _call_json(
        self, method: str, path: str, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return json.loads(await self._send(method, path, None, params, path))

    async def _send(
        self, method: str, path: str, body: Any, params: dict[str, Any] | None, affinity: str
    ) -> bytes:
        """One idempotent request, retried on connection failures and 502/503/504."""
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                status, answer = await self._transport.request(
                    method, path, content, params, affinity or path
                )
            except TransportFailure as exc:
                if last:
                    raise RemoteError(
                        f"{method} {self.url}{path} failed: {exc}", code="unreachable", status=0
                    ) from exc
            else:
                if 200 <= status < 300:
                    return answer
                error = _error_from(status, answer, f"{method} {path}")
                # An envhub sandbox_error is the environment's verdict, not a proxy hiccup.
                if last or status not in _RETRY_STATUSES or isinstance(error, SandboxError):
                    raise error
            await asyncio.sleep(self._backoff(attempt))
        raise AssertionError("unreachable")  # the loop always returns or raises

"""How :class:`envhub.clients.remote.RemoteEnvironment` calls a server: retried requests, and the
two session transports (one HTTP request per call, or a session's pooled WebSocket).

A :class:`RemoteSession <envhub.clients.remote.RemoteSession>` holds one :class:`SessionCalls`
object, made by the environment's :class:`Sessions` when the session is created,
so the session never branches on which transport it runs over.

Every call is idempotent and is retried on connection errors (and, over HTTP, on
502/503/504) with :func:`envhub._util.backoff.backoff_delay`: creates carry a client-generated
``session_id``, steps a ``request_id``, and close is idempotent on the server. Error
bodies become the :mod:`envhub.errors` class that declares their code
(:func:`~envhub.errors.error_class`: ``SessionNotFound``, ``CapacityError``, a plugin's own
class, ...) with the HTTP ``status`` attached, or :class:`~envhub.errors.RemoteError` for
codes no class declares.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from envhub._util.backoff import backoff_delay
from envhub.clients._http_transports import (
    AiohttpTransport,
    SocketPool,
    Transport,
    TransportFailure,
    WebSocketChannel,
    WebSocketRefused,
)
from envhub.errors import EnvhubError, RemoteError, SandboxError, error_class
from envhub.types import (
    CloseResult,
    ForkRequest,
    ForkResult,
    SessionInfo,
    SessionStart,
    StepRequest,
    StepResult,
)

__all__ = [
    "HttpSessionCalls",
    "HttpSessions",
    "Requests",
    "SessionCalls",
    "Sessions",
    "WebSocketSessionCalls",
    "WebSocketSessions",
]

M = TypeVar("M", bound=BaseModel)
WS_PATH = "/v1/ws"

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
    cls = error_class(code)
    if cls is None:
        return RemoteError(f"{where}: {message}", code=code, status=status)
    error = cls(message)
    error.status = status  # type: ignore[attr-defined]
    return error


class Requests:
    """Idempotent HTTP requests to one server, retried on connection failures and
    502/503/504 (``retries`` times, backing off from ``backoff_s``)."""

    def __init__(self, url: str, transport: Transport, retries: int, backoff_s: float) -> None:
        self.url, self.transport = url, transport
        self.retries, self.backoff_s = retries, backoff_s

    async def call(
        self, method: str, path: str, model: type[M], body: Any = None,
        params: dict[str, Any] | None = None, affinity: str = "",
    ) -> M:
        return model.model_validate_json(await self.send(method, path, body, params, affinity))

    async def send(
        self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
        affinity: str = "",
    ) -> bytes:
        """The body of a 2xx answer; an envhub error for any other answer."""
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                status, answer = await self.transport.request(
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
            await asyncio.sleep(backoff_delay(attempt, self.backoff_s))
        raise AssertionError("unreachable")  # the loop always returns or raises

    async def aclose(self) -> None:
        await self.transport.aclose()


class SessionCalls(Protocol):
    """How one remote session's calls reach the server."""

    async def step(self, request: StepRequest) -> StepResult: ...

    async def fork(self, request: ForkRequest) -> list[tuple[str, SessionCalls]]:
        """Fork the session on the server: each child's id and the calls that reach it
        (on the same server)."""
        ...

    async def close(self) -> CloseResult: ...

    async def info(self) -> SessionInfo: ...

    async def release(self) -> None:
        """Give back what the session holds on this side (its socket), with no call: for
        a session whose server is gone."""
        ...


class Sessions(Protocol):
    """Creates sessions on the server and hands each one its :class:`SessionCalls`."""

    async def create(self, body: dict[str, Any]) -> tuple[SessionStart, SessionCalls]: ...

    async def aclose(self) -> None: ...


class HttpSessions:
    """One HTTP request per session call (``POST /v1/sessions``, ``.../step``, ...)."""

    def __init__(self, requests: Requests) -> None:
        self._requests = requests

    async def create(self, body: dict[str, Any]) -> tuple[SessionStart, SessionCalls]:
        start = await self._requests.call(
            "POST", "/v1/sessions", SessionStart, body, affinity=body["session_id"]
        )
        return start, HttpSessionCalls(self._requests, start.session_id)

    async def aclose(self) -> None:
        """Nothing of its own: the requests belong to the environment."""


class HttpSessionCalls:
    __slots__ = ("_path", "_requests", "_session_id", "_step_path")

    def __init__(self, requests: Requests, session_id: str) -> None:
        self._requests, self._session_id = requests, session_id
        self._path = f"/v1/sessions/{session_id}"
        self._step_path = f"{self._path}/step"

    async def step(self, request: StepRequest) -> StepResult:  # the hot path: one frame less
        answer = await self._requests.send(
            "POST", self._step_path, request.model_dump(), None, self._session_id
        )
        return StepResult.model_validate_json(answer)

    async def fork(self, request: ForkRequest) -> list[tuple[str, SessionCalls]]:
        result = await self._requests.call("POST", f"{self._path}/fork", ForkResult,
                                           request.model_dump(), affinity=self._session_id)
        return [(sid, HttpSessionCalls(self._requests, sid)) for sid in result.session_ids]

    async def close(self) -> CloseResult:
        return await self._requests.call(
            "POST", f"{self._path}/close", CloseResult, affinity=self._session_id
        )

    async def info(self) -> SessionInfo:
        return await self._requests.call("GET", self._path, SessionInfo,
                                         affinity=self._session_id)

    async def release(self) -> None:
        return None  # one request per call: nothing is held between calls


class WebSocketSessions:
    """Session calls over pooled WebSockets (``/v1/ws``, aiohttp only).

    A session leases a socket from the pool at create and keeps it until its close, so
    its calls stay on one connection (and on the replica its create reached); later
    calls borrow a socket for the call. A dropped socket is reopened and the message
    resent, up to ``retries`` times with backoff.
    """

    def __init__(self, transport: AiohttpTransport, retries: int, backoff_s: float,
                 keep: int | None) -> None:
        self.pool = SocketPool(transport, WS_PATH, keep=keep)
        self.retries, self.backoff_s = retries, backoff_s

    async def create(self, body: dict[str, Any]) -> tuple[SessionStart, SessionCalls]:
        socket = self.pool.lease()
        try:
            start = await self.exchange(socket, SessionStart, {"op": "create", **body})
        except BaseException:
            await asyncio.shield(self.pool.release(socket))
            raise
        return start, WebSocketSessionCalls(self, socket, start.session_id)

    async def exchange(self, socket: WebSocketChannel, model: type[M],
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
                await asyncio.sleep(backoff_delay(attempt, self.backoff_s))
                continue
            if answer.startswith(b'{"error":'):
                raise _error_from(int(json.loads(answer).get("status", 0)), answer, where)
            return model.model_validate_json(answer)
        raise AssertionError("unreachable")  # the loop always returns or raises

    async def aclose(self) -> None:
        await self.pool.aclose()


class WebSocketSessionCalls:
    """A session's calls over the socket it was created on, until its close returns it."""

    __slots__ = ("_lock", "_session_id", "_sessions", "socket")

    def __init__(self, sessions: WebSocketSessions, socket: WebSocketChannel,
                 session_id: str) -> None:
        self._sessions, self._session_id = sessions, session_id
        self.socket: WebSocketChannel | None = socket
        self._lock = asyncio.Lock()  # one message in flight per socket

    async def step(self, request: StepRequest) -> StepResult:  # the hot path: no extra frame
        body = {"op": "step", "session_id": self._session_id, **request.model_dump()}
        async with self._lock:
            if self.socket is not None:
                return await self._sessions.exchange(self.socket, StepResult, body)
        return await self._on_borrowed(StepResult, body)

    async def fork(self, request: ForkRequest) -> list[tuple[str, SessionCalls]]:
        """Each child gets a socket of its own from the pool (its calls then run beside
        its siblings'), to the server this environment's sockets reach."""
        result = await self._send(ForkResult, {"op": "fork", "session_id": self._session_id,
                                               **request.model_dump()})
        pool = self._sessions.pool
        return [(sid, WebSocketSessionCalls(self._sessions, pool.lease(), sid))
                for sid in result.session_ids]

    async def close(self) -> CloseResult:
        try:
            return await self._send(CloseResult, {"op": "close", "session_id": self._session_id})
        finally:
            socket, self.socket = self.socket, None
            if socket is not None:
                await self._sessions.pool.release(socket)

    async def info(self) -> SessionInfo:
        return await self._send(SessionInfo, {"op": "info", "session_id": self._session_id})

    async def release(self) -> None:
        socket, self.socket = self.socket, None
        if socket is not None:
            await self._sessions.pool.release(socket)  # a broken socket is closed, not kept

    async def _send(self, model: type[M], message: dict[str, Any]) -> M:
        async with self._lock:
            if self.socket is not None:
                return await self._sessions.exchange(self.socket, model, message)
        return await self._on_borrowed(model, message)

    async def _on_borrowed(self, model: type[M], message: dict[str, Any]) -> M:
        """After close: over a socket borrowed from the pool for this one call."""
        pool = self._sessions.pool
        socket = pool.lease()
        try:
            return await self._sessions.exchange(socket, model, message)
        finally:
            await pool.release(socket)

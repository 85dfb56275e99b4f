"""Session calls over WebSockets, beside HTTP: ``WS /v1/ws`` and ``WS /v1/sessions/{id}/ws``.

A rollout's calls are many small, strictly sequential requests per session; a socket saves
the HTTP request parsing, routing and response framing of each (OpenEnv's transport is a
WebSocket for the same reason). Two endpoints, one handler:

- ``/v1/ws``, a *connection* socket: every message names its ``session_id`` and
  ``{"op": "create", ...}`` (the body of ``POST /v1/sessions``) opens sessions, so a client
  keeps a pool of sockets across episodes and pays no handshake or HTTP create per episode.
  Sessions live on the replica the socket reached; behind a balancer, keep connections
  sticky or use the per-session path.
- ``/v1/sessions/{id}/ws``, a *session* socket: the session id is in the path (an L7
  balancer routes it like the session's HTTP calls) and messages may omit it.

Messages are JSON: ``{"op": "create", "env": ..., "task_id": ..., "session_id": ...}``,
``{"op": "step", "session_id": ..., "tool_calls": [...], "content": ..., "request_id": ...}``,
``{"op": "close", "session_id": ...}`` or ``{"op": "info", "session_id": ...}``; each gets
one reply in order: the HTTP body (SessionStart, StepResult, CloseResult, SessionInfo) or
``{"error": {"code", "message"}, "status": n}`` with the code and status HTTP would answer.
A bad message gets an error reply and the socket stays open.

Pure ASGI like :mod:`envhub.server.fastpath`: it calls the same
:class:`~envhub.server.store.SessionStore` methods (which count the metrics and touch the
session for the idle reaper), checks the bearer token at the handshake (closing with
1008, which uvicorn answers as HTTP 403) and the size of every message.
"""

from __future__ import annotations

import hmac
import logging
import re
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from envhub.errors import EnvhubError
from envhub.server.errors import STATUS_BY_CODE, describe_envhub_error
from envhub.server.metrics import ServerMetrics
from envhub.server.models import SESSION_ID_PATTERN, CreateSession, StepRequest
from envhub.server.store import SessionStore

__all__ = ["SessionWebSocket"]

log = logging.getLogger("envhub.server")

CONNECTION_PATH = "/v1/ws"
_PREFIX = "/v1/sessions/"
_SUFFIX = "/ws"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
POLICY_VIOLATION = 1008  # WebSocket close code for a refused token


class SessionWebSocket:
    """Serves ``/v1/ws`` and ``/v1/sessions/{id}/ws`` sockets; hands every other scope to
    ``app``."""

    def __init__(self, app: ASGIApp, *, store: SessionStore, metrics: ServerMetrics,
                 max_message_bytes: int, token: str | None) -> None:
        self.app = app
        self.store = store
        self.metrics = metrics
        self.max_message_bytes = max_message_bytes
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "") if scope["type"] == "websocket" else ""
        if path == CONNECTION_PATH:
            path_session = None
        elif path.startswith(_PREFIX) and path.endswith(_SUFFIX):
            path_session = path[len(_PREFIX):-len(_SUFFIX)]
        else:
            await self.app(scope, receive, send)
            return
        if (await receive())["type"] != "websocket.connect":
            return
        if path_session is not None and not _SESSION_ID.match(path_session):
            self.metrics.errors.labels("not_found").inc()
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            return
        if self.expected is not None:
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                self.metrics.errors.labels("unauthorized").inc()
                await send({"type": "websocket.close", "code": POLICY_VIOLATION})
                return
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return  # websocket.disconnect
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            reply = await self._answer(path_session, data, path)
            try:
                await send({"type": "websocket.send", "text": reply.decode()})
            except OSError:  # the client left mid-call; a retry gets the stored result
                return

    async def _answer(self, path_session: str | None, data: str | bytes, where: str) -> bytes:
        """The reply to one message: a result body or an error body."""
        if _too_large(data, self.max_message_bytes):
            return self._error("payload_too_large",
                               f"message larger than {self.max_message_bytes} bytes")
        try:
            request = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return self._error("invalid_request", f"malformed JSON ({exc})")
        if not isinstance(request, dict) or request.get("op") not in _OPS:
            return self._error("invalid_request", "send a JSON object whose op is one of "
                               + ", ".join(f'"{op}"' for op in _OPS))
        op = request.pop("op")
        try:
            session_id = request.pop("session_id", path_session)
            if not isinstance(session_id, str | None) or path_session not in (None, session_id):
                return self._error("invalid_request", "session_id: a string naming the "
                                   "session (the one in the path, on a session socket)")
            if op == "create":
                body = CreateSession.model_validate({**request, "session_id": session_id})
                return _body(await self._create(body))
            if session_id is None:
                return self._error("invalid_request", f"{op} needs the session_id")
            result: BaseModel
            if op == "step":
                step = StepRequest.model_validate(request)
                result = await self.store.step(
                    session_id, step.tool_calls, step.content, step.request_id
                )
            elif request:
                return self._error("invalid_request",
                                   f"unexpected fields for {op}: {', '.join(map(str, request))}")
            elif op == "close":
                result = await self.store.close(session_id)
            else:
                result = self.store.info(session_id)
        except ValidationError as exc:
            return self._error("invalid_request", _describe(exc))
        except EnvhubError as exc:
            status, code, text = describe_envhub_error(exc, f"WS {where} {op}")
            return self._error(code, text, status)
        except Exception as exc:
            log.error("WS %s %s crashed", where, op, exc_info=exc)
            return self._error("internal", f"internal server error ({type(exc).__name__})")
        return _body(result)

    async def _create(self, body: CreateSession) -> BaseModel:
        return await self.store.create(
            body.env, task_id=body.task_id, seed=body.seed, options=body.options,
            session_id=body.session_id,
        )

    def _error(self, code: str, message: str, status: int | None = None) -> bytes:
        self.metrics.errors.labels(code).inc()
        status = status or STATUS_BY_CODE.get(code, 500)
        return orjson.dumps({"error": {"code": code, "message": message}, "status": status})


_OPS = ("create", "step", "close", "info")


def _too_large(data: str | bytes, limit: int) -> bool:
    """Whether a message exceeds ``limit`` bytes; a text frame counts its UTF-8 bytes (one
    to four per character), encoded only when its length alone cannot decide."""
    if isinstance(data, bytes) or len(data) > limit:
        return len(data) > limit
    return len(data) * 4 > limit and len(data.encode("utf-8", "surrogatepass")) > limit


def _body(result: BaseModel) -> bytes:
    return result.__pydantic_serializer__.to_json(result)


def _describe(exc: ValidationError) -> str:
    parts: list[Any] = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg"))
    return "; ".join(str(p) for p in parts) or "invalid request"

"""``WS /v1/sessions/{id}/ws``: a session's steps and close over one WebSocket, beside HTTP.

A rollout's steps are many small, strictly sequential requests per session; one socket per
session saves the HTTP request parsing, routing and response framing of each (OpenEnv's
transport is a WebSocket for the same reason). The session id stays in the path, so an
L7 balancer routes the socket like the session's HTTP calls. Messages are JSON:
``{"op": "step", "tool_calls": [...], "content": ..., "request_id": ...}``,
``{"op": "close"}`` or ``{"op": "info"}``; each gets one reply in order: the HTTP body
(StepResult, CloseResult, SessionInfo) or ``{"error": {"code", "message"}, "status": n}``
with the code and status HTTP would answer. A bad message gets an error reply and the
socket stays open.

Pure ASGI like :mod:`envhub.server.fastpath`: it calls the same
:class:`~envhub.server.store.SessionStore` methods (which count the metrics and touch the
session for the idle reaper), checks the bearer token at the handshake (closing with
1008, which uvicorn answers as HTTP 403) and the size of every message.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from envhub.errors import EnvhubError
from envhub.server.errors import STATUS_BY_CODE, describe_envhub_error
from envhub.server.metrics import ServerMetrics
from envhub.server.models import StepRequest
from envhub.server.store import SessionStore

__all__ = ["SessionWebSocket"]

log = logging.getLogger("envhub.server")

_PREFIX = "/v1/sessions/"
_SUFFIX = "/ws"
POLICY_VIOLATION = 1008  # WebSocket close code for a refused token


class SessionWebSocket:
    """Serves ``/v1/sessions/{id}/ws`` sockets; hands every other scope to ``app``."""

    def __init__(self, app: ASGIApp, *, store: SessionStore, metrics: ServerMetrics,
                 max_message_bytes: int, token: str | None) -> None:
        self.app = app
        self.store = store
        self.metrics = metrics
        self.max_message_bytes = max_message_bytes
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "") if scope["type"] == "websocket" else ""
        if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
            await self.app(scope, receive, send)
            return
        session_id = path[len(_PREFIX):-len(_SUFFIX)]
        if (await receive())["type"] != "websocket.connect":
            return
        if not session_id or "/" in session_id:
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
            reply = await self._answer(session_id, data, path)
            try:
                await send({"type": "websocket.send", "text": reply.decode()})
            except OSError:  # the client left mid-call; a retry gets the stored result
                return

    async def _answer(self, session_id: str, data: str | bytes, where: str) -> bytes:
        """The reply to one message: a result body or an error body."""
        if len(data) > self.max_message_bytes:
            return self._error("payload_too_large",
                               f"message larger than {self.max_message_bytes} bytes")
        try:
            request = orjson.loads(data)
            op = request.pop("op", None) if isinstance(request, dict) else None
        except orjson.JSONDecodeError as exc:
            return self._error("invalid_request", f"malformed JSON ({exc})")
        try:
            result: BaseModel
            if op == "step":
                step = StepRequest.model_validate(request)
                result = await self.store.step(
                    session_id, step.tool_calls, step.content, step.request_id
                )
            elif op == "close" and not request:
                result = await self.store.close(session_id)
            elif op == "info" and not request:
                result = self.store.info(session_id)
            else:
                return self._error("invalid_request", 'send {"op": "step", ...}, '
                                   '{"op": "close"} or {"op": "info"} as a JSON object')
        except ValidationError as exc:
            return self._error("invalid_request", _describe(exc))
        except EnvhubError as exc:
            status, code, text = describe_envhub_error(exc, f"WS {where}")
            return self._error(code, text, status)
        except Exception as exc:
            log.error("WS %s crashed", where, exc_info=exc)
            return self._error("internal", f"internal server error ({type(exc).__name__})")
        return result.__pydantic_serializer__.to_json(result)

    def _error(self, code: str, message: str, status: int | None = None) -> bytes:
        self.metrics.errors.labels(code).inc()
        status = status or STATUS_BY_CODE.get(code, 500)
        return orjson.dumps({"error": {"code": code, "message": message}, "status": status})


def _describe(exc: ValidationError) -> str:
    parts: list[Any] = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg"))
    return "; ".join(str(p) for p in parts) or "invalid request"

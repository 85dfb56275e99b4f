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
``{"op": "fork", "session_id": ..., "n": ..., "fork_id": ...}``,
``{"op": "close", "session_id": ...}`` or ``{"op": "info", "session_id": ...}``; each gets
one reply in order: the HTTP body (SessionStart, StepResult, ForkResult, CloseResult,
SessionInfo) or
``{"error": {"code", "message"}, "status": n}`` with the code and status HTTP would answer.
A bad message gets an error reply and the socket stays open.

Pure ASGI like :mod:`envhub.server.fastpath`, and like it one more door onto the same
:class:`~envhub.server.store.SessionStore` method per verb (which count the metrics and
touch the session for the idle reaper). The bearer token is checked at the handshake by
:class:`~envhub.server.auth.BearerAuth` in front of it (a refusal closes with 1008, which
uvicorn answers as HTTP 403); every message is held to the same
:class:`~envhub.server.limits.SizeLimit` as an HTTP body, and validation failures, core
errors and crashes are worded by :mod:`envhub.server.errors` with the status HTTP answers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
import pydantic_core
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from envhub.errors import EnvhubError
from envhub.server.auth import POLICY_VIOLATION
from envhub.server.errors import (
    STATUS_BY_CODE,
    VALIDATION_STATUS,
    describe_envhub_error,
    describe_unexpected,
    describe_validation,
    malformed_json,
)
from envhub.server.limits import SizeLimit
from envhub.server.metrics import ServerMetrics
from envhub.server.store import SessionStore
from envhub.types import SESSION_ID_PATTERN, CreateSession, ForkRequest, StepRequest

__all__ = ["SessionWebSocket"]

CONNECTION_PATH = "/v1/ws"
_PREFIX = "/v1/sessions/"
_SUFFIX = "/ws"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_OPS = ("create", "step", "fork", "close", "info")


def _decode(data: str | bytes) -> Any:
    """A message's JSON, read as an HTTP body is: by pydantic's parser (the fast path's;
    integers keep every digit, where orjson would make a float of one past 64 bits), then,
    for what it refuses (an escaped unpaired surrogate, which a model's text may hold, or
    nesting past 200 levels), by ``json`` (FastAPI's). ``ValueError`` names what is
    wrong when neither reads it."""
    try:
        return pydantic_core.from_json(data)
    except ValueError as strict:
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise strict from None


class SessionWebSocket:
    """Serves ``/v1/ws`` and ``/v1/sessions/{id}/ws`` sockets; hands every other scope to
    ``app``."""

    def __init__(self, app: ASGIApp, *, store: SessionStore, metrics: ServerMetrics,
                 limit: SizeLimit) -> None:
        self.app = app
        self.store = store
        self.metrics = metrics
        self.limit = limit
        self.too_large = limit.message("message")

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
        if self.limit.exceeded(data):
            return self._error(STATUS_BY_CODE["payload_too_large"], "payload_too_large",
                               self.too_large)
        try:
            request = _decode(data)
        except ValueError as exc:
            return self._invalid(malformed_json(exc))
        if not isinstance(request, dict) or request.get("op") not in _OPS:
            return self._invalid("send a JSON object whose op is one of "
                                 + ", ".join(f'"{op}"' for op in _OPS))
        op = request.pop("op")
        session_id = request.pop("session_id", path_session)
        if not isinstance(session_id, str | None) or path_session not in (None, session_id):
            return self._invalid("session_id: a string naming the session (the one in the "
                                 "path, on a session socket)")
        if session_id is None and op != "create":
            return self._invalid(f"{op} needs the session_id")
        if request and op in ("close", "info"):
            return self._invalid(f"unexpected fields for {op}: {', '.join(map(str, request))}")
        try:
            result = await self._call(op, session_id, request)
            return result.__pydantic_serializer__.to_json(result)
        except ValidationError as exc:
            return self._error(*describe_validation(exc.errors()))
        except EnvhubError as exc:
            return self._error(*describe_envhub_error(exc, f"WS {where} {op}"))
        except Exception as exc:  # a crash, or a result JSON cannot carry: a reply, not a drop
            return self._error(*describe_unexpected(exc, f"WS {where} {op}"))

    async def _call(self, op: str, session_id: str | None, fields: dict[str, Any]
                    ) -> BaseModel:
        """The store's method for ``op``, with the message's remaining ``fields`` validated
        by the model the HTTP route uses."""
        if op == "create":
            body = CreateSession.model_validate({**fields, "session_id": session_id})
            return await self.store.create(body)
        assert session_id is not None  # _answer refused the message without one
        if op == "step":
            return await self.store.step(session_id, StepRequest.model_validate(fields))
        if op == "fork":
            return await self.store.fork(session_id, ForkRequest.model_validate(fields))
        if op == "close":
            return await self.store.close(session_id)
        return self.store.info(session_id)

    def _invalid(self, message: str) -> bytes:
        return self._error(VALIDATION_STATUS, "invalid_request", message)

    def _error(self, status: int, code: str, message: str) -> bytes:
        self.metrics.errors.labels(code).inc()
        return orjson.dumps({"error": {"code": code, "message": message}, "status": status})

"""The hot session calls, served without FastAPI's per-request machinery.

A rollout spends almost all its requests on ``POST /v1/sessions/{id}/step`` (and one
``close`` per episode). FastAPI's routing, dependency solving and response handling cost
about three times the step itself, so this pure ASGI layer answers well-formed step and
close requests directly: parse with the same pydantic model, call the same
:class:`~envhub.server.store.SessionStore` method, answer with the same error mapping.
Anything else, including every body that fails validation, goes on to the FastAPI
routes, which stay the documented API and answer the 422s. The bearer token and the body
size were checked by the layers in front (:mod:`~envhub.server.auth`,
:mod:`~envhub.server.limits`), as for the routes.
"""

from __future__ import annotations

from collections.abc import Awaitable

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envhub.errors import EnvhubError
from envhub.server.errors import envhub_error_response, unexpected_error_response
from envhub.server.metrics import ServerMetrics
from envhub.server.store import SessionStore
from envhub.types import CloseResult, StepRequest, StepResult

__all__ = ["SessionFastPath"]

_PREFIX = "/v1/sessions/"
_JSON_HEADERS = [(b"content-type", b"application/json")]


class SessionFastPath:
    def __init__(self, app: ASGIApp, *, store: SessionStore, metrics: ServerMetrics) -> None:
        self.app = app
        self.store = store
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = _session_call(scope)
        if target is None:
            await self.app(scope, receive, send)
            return
        session_id, action = target
        body = await _read_body(receive)
        if action == "step":
            try:
                request = StepRequest.model_validate_json(body)
            except ValidationError:
                await self.app(scope, _replay(body), send)
                return
            operation: Awaitable[StepResult | CloseResult] = self.store.step(session_id, request)
        else:
            operation = self.store.close(session_id)
        where = f"POST {scope['path']}"
        try:
            result = await operation
            payload = result.__pydantic_serializer__.to_json(result)
        except EnvhubError as exc:
            await envhub_error_response(exc, self.metrics, where)(scope, receive, send)
            return
        except Exception as exc:  # answered as the routes answer it, not a dropped connection
            await unexpected_error_response(exc, self.metrics, where)(scope, receive, send)
            return
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())],
        })
        await send({"type": "http.response.body", "body": payload})


def _session_call(scope: Scope) -> tuple[str, str] | None:
    """``(session_id, "step"|"close")`` for a fast-path request, else ``None``."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path: str = scope["path"]
    if not path.startswith(_PREFIX):
        return None
    session_id, _, action = path[len(_PREFIX):].partition("/")
    if not session_id or action not in ("step", "close"):
        return None
    if action == "step":
        # Only declared-length JSON bodies: the size limit has checked them, and odd
        # uploads get FastAPI's full handling and messages.
        headers = dict(scope["headers"])
        if b"content-length" not in headers or b"json" not in headers.get(b"content-type", b""):
            return None
    return session_id, action


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    """A ``receive`` that hands the already-read body to the next app."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive

"""Bearer-token authentication, one check for every door: the FastAPI routes, the session
fast path and the WebSocket handshakes all sit behind this ASGI layer.

Pure ASGI (not Starlette's ``BaseHTTPMiddleware``) keeps the per-request cost to a header
lookup and a constant-time compare, which matters at thousands of steps per second.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from envhub.server.errors import error_response

__all__ = ["POLICY_VIOLATION", "BearerAuth"]

POLICY_VIOLATION = 1008  # WebSocket close code for a refused handshake (uvicorn: HTTP 403)

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="envhub"'}


class BearerAuth:
    """Refuses HTTP requests (401) and WebSocket handshakes (close 1008) that lack
    ``Authorization: Bearer <token>``, except on ``open_paths``; ``on_error`` counts each
    refusal by its code."""

    def __init__(self, app: ASGIApp, *, token: str, open_paths: frozenset[str],
                 on_error: Callable[[str], None]) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.open_paths = open_paths
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        self.on_error("unauthorized")
        if scope["type"] == "websocket":
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            return
        message = "missing bearer token" if not given else "wrong bearer token"
        await error_response(401, "unauthorized", message, _CHALLENGE)(scope, receive, send)

"""Pure ASGI middleware for the two checks that must run before a route reads the body:
bearer-token authentication and the request-size limit.

Pure ASGI (not Starlette's ``BaseHTTPMiddleware``) keeps the per-request cost to a few
attribute lookups, which matters at thousands of steps per second.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envhub.server.errors import error_body

__all__ = ["BearerAuth", "BodySizeLimit"]

OnError = Callable[[str], None]


async def _send_error(send: Send, status: int, code: str, message: str,
                      headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = error_body(code, message)
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    """Rejects requests without ``Authorization: Bearer <token>`` (401), except open paths."""

    def __init__(self, app: ASGIApp, *, token: str, open_paths: frozenset[str],
                 on_error: OnError) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.open_paths = open_paths
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        if not hmac.compare_digest(given, self.expected):
            self.on_error("unauthorized")
            message = "missing bearer token" if not given else "wrong bearer token"
            await _send_error(send, 401, "unauthorized", message,
                              ((b"www-authenticate", b'Bearer realm="envhub"'),))
            return
        await self.app(scope, receive, send)


class PayloadTooLarge(HTTPException):
    """Raised from ``receive`` when a streamed body outgrows the limit; FastAPI re-raises
    ``HTTPException`` from body reading, so it reaches the error handlers as a 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


class BodySizeLimit:
    """413 for bodies over ``max_bytes``: by ``Content-Length`` up front, and by counting
    the streamed chunks for chunked uploads that declare no length.

    FastAPI routes turn the counting error into a 413 through the error handlers; layers
    that read the body themselves (the session fast path) let it through, and it is
    answered here, since no response has started yet.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, on_error: OnError) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit():
            # The HTTP parser never delivers more than a declared length, so only
            # undeclared (chunked) bodies need counting.
            if int(declared) > self.max_bytes:
                self.on_error("payload_too_large")
                await _send_error(send, 413, "payload_too_large",
                                  f"request body larger than {self.max_bytes} bytes")
                return
            await self.app(scope, receive, send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise PayloadTooLarge(self.max_bytes)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except PayloadTooLarge as exc:
            if started:
                raise
            self.on_error("payload_too_large")
            await _send_error(send, 413, "payload_too_large", str(exc.detail))

"""The request-size limit, one rule for every door: an HTTP body (routes and the session
fast path, by :class:`BodySizeLimit` in front of both) and each WebSocket message (checked
by the socket handler with the same :class:`SizeLimit`).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envhub.server.errors import error_response

__all__ = ["BodySizeLimit", "SizeLimit"]

CODE = "payload_too_large"
STATUS = 413


class SizeLimit:
    """At most ``max_bytes`` per request body or WebSocket message; text counts its UTF-8
    bytes, not its characters."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes

    def exceeded(self, data: str | bytes) -> bool:
        """Whether ``data`` is over the limit; a text frame (one to four bytes per
        character) is encoded only when its length alone cannot decide."""
        if isinstance(data, bytes) or len(data) > self.max_bytes:
            return len(data) > self.max_bytes
        return (len(data) * 4 > self.max_bytes
                and len(data.encode("utf-8", "surrogatepass")) > self.max_bytes)

    def message(self, what: str) -> str:
        return f"{what} larger than {self.max_bytes} bytes"


class PayloadTooLarge(HTTPException):
    """Raised from ``receive`` when a streamed body outgrows the limit; FastAPI re-raises
    ``HTTPException`` from body reading, so it reaches the error handlers as a 413."""

    def __init__(self, message: str) -> None:
        super().__init__(STATUS, message)


class BodySizeLimit:
    """413 for HTTP bodies over the limit: by ``Content-Length`` up front, and by counting
    the streamed chunks for chunked uploads that declare no length.

    FastAPI routes turn the counting error into a 413 through the error handlers; layers
    that read the body themselves (the session fast path) let it through, and it is
    answered here, since no response has started yet. ``on_error`` counts each 413.
    """

    def __init__(self, app: ASGIApp, *, limit: SizeLimit,
                 on_error: Callable[[str], None]) -> None:
        self.app = app
        self.max_bytes = limit.max_bytes
        self.refusal = limit.message("request body")
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
                self.on_error(CODE)
                await error_response(STATUS, CODE, self.refusal)(scope, receive, send)
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
                    raise PayloadTooLarge(self.refusal)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except PayloadTooLarge:
            if started:
                raise
            self.on_error(CODE)
            await error_response(STATUS, CODE, self.refusal)(scope, receive, send)

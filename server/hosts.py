"""Which ``Host`` and ``Origin`` a request may name: one rule for every door of the server
(REST, the session fast path, WebSocket handshakes, MCP over HTTP) and for ``envhub view``.

A web page the operator visits can re-point its own domain at 127.0.0.1 (DNS rebinding)
and drive a local server with the browser as the client; its requests then carry
``Host: evil.example``. A page can also post to the server under its own origin, and the
browser says so in ``Origin``. So a request must name an allowed host in ``Host``, and a
present ``Origin`` must be an allowed host or the request's own origin (the MCP transport
spec requires servers to validate ``Origin``). Clients other than browsers send no
``Origin`` and the name they dialled in ``Host``, so they pass.

Allowed by default: the loopback names (``localhost``, ``127.0.0.1``, ``::1``) and the
address the server listens on; plus the names the operator lists (``--allowed-host``;
``*`` turns the check off). Listening on every address (``0.0.0.0``, ``::``) with no names
listed accepts any ``Host``, since the operator exposed the server under names it cannot
know (a container's, a balancer's), but still refuses foreign browser origins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from envhub.server.errors import Described, error_response

__all__ = ["LOOPBACK_NAMES", "HostAllowList", "TrustedHosts"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_EVERY_ADDRESS = ("0.0.0.0", "::", "")
_ANY = "*"

HOST_CODE, HOST_STATUS = "untrusted_host", 400
ORIGIN_CODE, ORIGIN_STATUS = "untrusted_origin", 403


def _hostname(netloc: str) -> str | None:
    """``netloc``'s host name, lowercase, without port or IPv6 brackets (``None`` if it
    names none)."""
    try:
        return urlsplit(f"//{netloc}").hostname
    except ValueError:  # an unbalanced IPv6 bracket
        return None


@dataclass(frozen=True)
class HostAllowList:
    """Host names (lowercase, no port) that ``Host`` and ``Origin`` may name."""

    names: frozenset[str]
    any_host: bool = False  # any ``Host`` (bound to every address, no names listed)

    @classmethod
    def for_bind(cls, host: str, listed: Iterable[str] = ()) -> HostAllowList:
        """The allow-list of a server listening on ``host`` with the operator's ``listed``
        names (``*``: any host and origin)."""
        names = {name for name in (_hostname(n) or n for n in listed) if name}
        exposed = host in _EVERY_ADDRESS
        if not exposed:
            names.add(_hostname(f"[{host}]" if ":" in host else host) or host)
        return cls(frozenset({*LOOPBACK_NAMES, *names}), any_host=exposed and not names)

    def allows_host(self, host: str) -> bool:
        return self.any_host or _ANY in self.names or _hostname(host) in self.names

    def allows_origin(self, origin: str, host: str) -> bool:
        """A browser page's origin: an allowed name, or the request's own origin."""
        if _ANY in self.names:
            return True
        scheme, _, netloc = origin.partition("://")
        if scheme.lower() not in ("http", "https"):
            return False  # "null" (a sandboxed frame, a file), or not an origin at all
        return _hostname(netloc) in self.names or netloc.lower() == host.lower()


class TrustedHosts:
    """Pure ASGI: HTTP requests and WebSocket handshakes whose ``Host`` is not allowed get
    400 ``untrusted_host``, whose ``Origin`` is not, 403 ``untrusted_origin``, with the
    body ``{"error": {code, message}}`` (a refused handshake gets the same HTTP answer).
    ``on_error`` counts each refusal by its code."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed: HostAllowList,
        on_error: Callable[[str], None] = lambda code: None,
    ) -> None:
        self.app = app
        self.allowed = allowed
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, code, message = refusal
        self.on_error(code)
        if scope["type"] == "websocket" and (await receive())["type"] != "websocket.connect":
            return
        # on a WebSocket, the ASGI denial response (uvicorn's websocket.http.response)
        await error_response(status, code, message)(scope, receive, send)

    def _refusal(self, scope: Scope) -> Described | None:
        """Why the request is refused, or ``None`` when it is served."""
        host = origin = ""
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        if not self.allowed.allows_host(host):
            why = "is not a name this server answers to (a guard against DNS rebinding)"
            return HOST_STATUS, HOST_CODE, f"Host {host[:100]!r} {why}"
        if origin and not self.allowed.allows_origin(origin, host):
            why = "is another site's: browser pages of other sites may not call this server"
            return ORIGIN_STATUS, ORIGIN_CODE, f"the web origin {origin[:100]!r} {why}"
        return None

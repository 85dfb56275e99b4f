"""The two HTTP engines ``RemoteEnvironment`` can run on, behind one small interface.

``aiohttp`` is the default when installed: its C parser and connection pool cost about a
tenth of httpx's CPU per request, which bounds a rollout driving thousands of sessions
(see ``benchmarks/server_throughput.py``). httpx, a core dependency, is the fallback. Its
pool scans every connection on each request, so it is sharded into pools of
``_HTTPX_POOL_SIZE`` connections, with each session pinned to one shard.

``max_connections=None`` (``RemoteEnvironment``'s default) leaves the pools uncapped:
each holds as many connections as it has requests in flight, so a caller running C
sessions gets C connections and never a queue; httpx then spreads them over
``_HTTPX_UNCAPPED_SHARDS`` pools.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any, Literal, Protocol

import httpx

__all__ = [
    "HttpEngine",
    "SocketPool",
    "Transport",
    "TransportFailure",
    "WebSocketChannel",
    "WebSocketRefused",
    "make_transport",
]

HttpEngine = Literal["auto", "aiohttp", "httpx"]
_HTTPX_POOL_SIZE = 64
_HTTPX_UNCAPPED_SHARDS = 16


class TransportFailure(Exception):
    """The request did not get an HTTP answer (refused, reset, timed out)."""


class _Dropped(TransportFailure):
    """The connection was refused, reset or closed (as opposed to a reply timing out)."""


class Transport(Protocol):
    async def request(
        self, method: str, path: str, content: bytes | None, params: dict[str, Any] | None,
        affinity: str,
    ) -> tuple[int, bytes]:
        """Send one request; return status and body, or raise :class:`TransportFailure`.
        ``affinity`` keeps a session's requests on one pool where that matters."""
        ...

    async def aclose(self) -> None: ...


class AiohttpTransport:
    """One ``aiohttp.ClientSession``, created on first use inside the running loop."""

    def __init__(
        self, url: str, headers: dict[str, str], timeout: float, max_connections: int | None
    ) -> None:
        self.url, self.headers = url, headers
        self.timeout, self.max_connections = timeout, max_connections
        self._session: Any = None
        self._sockets: Any = None

    def _client(self) -> Any:
        if self._session is None or self._session.closed:
            import aiohttp

            self._session = aiohttp.ClientSession(
                base_url=self.url,
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout, connect=min(self.timeout, 10.0)),
                connector=aiohttp.TCPConnector(limit=self.max_connections or 0,
                                               limit_per_host=0),
            )
        return self._session

    async def request(
        self, method: str, path: str, content: bytes | None, params: dict[str, Any] | None,
        affinity: str,
    ) -> tuple[int, bytes]:
        import aiohttp

        try:
            async with self._client().request(method, path, data=content, params=params) as resp:
                return resp.status, await resp.read()
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            raise TransportFailure(f"{type(exc).__name__}: {exc}") from exc

    def sockets(self) -> Any:
        """The ``ClientSession`` for :class:`WebSocketChannel` (no connection limit)."""
        if self._sockets is None or self._sockets.closed:
            import aiohttp

            self._sockets = aiohttp.ClientSession(
                base_url=self.url.replace("http", "ws", 1),
                timeout=aiohttp.ClientTimeout(total=None, connect=min(self.timeout, 10.0)),
                connector=aiohttp.TCPConnector(limit=0),
            )
        return self._sockets

    async def aclose(self) -> None:
        for session in (self._session, self._sockets):
            if session is not None:
                await session.close()


class WebSocketChannel:
    """A WebSocket (connected on first use) carrying one request, then its reply, at a time.

    Sockets get their own unlimited aiohttp connector: each holds a connection across
    calls, and sharing the HTTP pool's limit would leave no connection for plain requests.
    """

    def __init__(self, transport: AiohttpTransport, path: str) -> None:
        self._transport, self.path = transport, path
        self._ws: Any = None

    @property
    def usable(self) -> bool:
        """Connected and not closed, or not connected yet (connects on the next call)."""
        return self._ws is None or not self._ws.closed

    async def exchange(self, message: bytes) -> bytes:
        """Send ``message`` and return the reply; :class:`TransportFailure` if the socket
        drops (it is reconnected on the next call), :class:`WebSocketRefused` if the
        handshake is refused.

        A reused socket that turns out dead (the server or a proxy dropped it while it sat
        idle in a pool) is reconnected and the message resent at once: every envhub
        message is idempotent (creates carry a session id, steps a request id).

        A call cancelled while its reply is outstanding closes the socket: that reply
        would otherwise answer the next message sent on it."""
        try:
            if self._ws is not None:
                try:
                    return await self._send_and_receive(message)
                except _Dropped:
                    pass
            return await self._send_and_receive(message)
        except asyncio.CancelledError:
            await asyncio.shield(self.aclose())
            raise

    async def _send_and_receive(self, message: bytes) -> bytes:
        import aiohttp

        try:
            if self._ws is None or self._ws.closed:
                self._ws = await self._transport.sockets().ws_connect(
                    self.path, headers=self._transport.headers, autoping=True
                )
            await self._ws.send_bytes(message)
            reply = await self._ws.receive(timeout=self._transport.timeout)
        except aiohttp.WSServerHandshakeError as exc:
            raise WebSocketRefused(exc.status) from exc
        except TimeoutError as exc:
            await self.aclose()
            raise TransportFailure(f"no reply on {self.path} in {self._transport.timeout}s") \
                from exc
        except (aiohttp.ClientConnectionError, ConnectionError) as exc:
            await self.aclose()
            raise _Dropped(f"{type(exc).__name__}: {exc}") from exc
        if reply.type == aiohttp.WSMsgType.TEXT:
            return str(reply.data).encode()
        if reply.type == aiohttp.WSMsgType.BINARY:
            return bytes(reply.data)
        await self.aclose()
        raise _Dropped(f"WebSocket {self.path} ended ({reply.type.name} {reply.data})")

    async def aclose(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None and not ws.closed:
            await ws.close()


class SocketPool:
    """Idle :class:`WebSocketChannel` s to one path, reused across sessions.

    A session leases one for its whole life (so its calls stay on one connection, and on
    the replica that connection reached) and releases it at close; at most ``keep`` idle
    ones are kept open (``None``: all of them, as many as were ever in use at once).
    """

    def __init__(self, transport: AiohttpTransport, path: str, keep: int | None) -> None:
        self._transport, self.path, self.keep = transport, path, keep
        self._idle: list[WebSocketChannel] = []

    def lease(self) -> WebSocketChannel:
        return self._idle.pop() if self._idle else WebSocketChannel(self._transport, self.path)

    async def release(self, channel: WebSocketChannel) -> None:
        if channel.usable and (self.keep is None or len(self._idle) < self.keep):
            self._idle.append(channel)
        else:
            await channel.aclose()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for channel in idle:
            await channel.aclose()


class WebSocketRefused(Exception):
    """The server refused the WebSocket handshake with HTTP ``status`` (403: bad token)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"WebSocket handshake refused with HTTP {status}")
        self.status = status


class HttpxTransport:
    """``httpx.AsyncClient`` pools of at most ``_HTTPX_POOL_SIZE`` connections each (or
    ``_HTTPX_UNCAPPED_SHARDS`` uncapped ones)."""

    def __init__(
        self, url: str, headers: dict[str, str], timeout: float, max_connections: int | None
    ) -> None:
        if max_connections is None:
            shards, per_shard = _HTTPX_UNCAPPED_SHARDS, None
        else:
            shards = max(1, -(-max_connections // _HTTPX_POOL_SIZE))
            per_shard = -(-max_connections // shards)
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        self._clients = [
            httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                              timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))
            for _ in range(shards)
        ]

    async def request(
        self, method: str, path: str, content: bytes | None, params: dict[str, Any] | None,
        affinity: str,
    ) -> tuple[int, bytes]:
        client = self._clients[zlib.crc32(affinity.encode()) % len(self._clients)]
        try:
            response = await client.request(method, path, content=content, params=params)
        except httpx.TransportError as exc:
            raise TransportFailure(f"{type(exc).__name__}: {exc}") from exc
        return response.status_code, response.content

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


def make_transport(
    engine: HttpEngine, url: str, headers: dict[str, str], timeout: float,
    max_connections: int | None,
) -> Transport:
    if engine == "auto":
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            engine = "httpx"
        else:
            engine = "aiohttp"
    cls = AiohttpTransport if engine == "aiohttp" else HttpxTransport
    return cls(url, headers, timeout, max_connections)

"""Serving an ASGI app with uvicorn from this process: on a thread, or in the running loop.

:class:`ServerThread` is for blocking owners (tests, a fleet replica's actor, the
scripted model server): ``server.run`` on a daemon thread with its own event loop
(uvloop where installed, as ``envhub serve``). :func:`serve_in_loop` is for async owners
that share their loop with the server (a per-episode MCP server, a plugin's site on the
runtime loop). Both serve on a socket bound before the server starts, so the URL is
known at once and no other process can take the port, and neither touches the process's
signal handlers: the process's owner handles Ctrl-C, and many servers may run in one
process. :class:`ClosingStreams` lets such a server stop while clients hold a
server-sent-events stream open.

uvicorn is imported when a server is made, so importing this module costs nothing where
no server runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from envhub._util.net import bound_socket

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ClosingStreams", "ServerThread", "serve_in_loop", "socket_url", "uvicorn_server"]

_Server = TypeVar("_Server", bound="ServerThread")


@functools.cache
def _quiet_server_class() -> type[uvicorn.Server]:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """A uvicorn server that leaves the process's signal handlers alone."""

        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    return QuietServer


def uvicorn_server(app: ASGIApp, **config: Any) -> uvicorn.Server:
    """A uvicorn server for ``app`` (``config``: :class:`uvicorn.Config` keywords over
    warnings-only logs, no access log and the app's lifespan on) that never installs
    signal handlers; run it with ``run``/``serve(sockets=[...])``."""
    import uvicorn

    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "on"}
    return _quiet_server_class()(uvicorn.Config(app, **{**settings, **config}))


def socket_url(sock: socket.socket, host: str | None = None) -> str:
    """``http://host:port`` of a bound socket, ``host`` as the caller names it (default:
    the address it is bound to; an IPv6 host in brackets)."""
    bound, port = sock.getsockname()[:2]
    host = host or bound
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ServerThread:
    """``app`` served by uvicorn on a daemon thread, at :attr:`url` (``host``, and ``port``
    or one the OS picks). :meth:`start` returns once it serves; :meth:`stop` (or leaving
    the ``with`` block) shuts it down, the app's lifespan included.

    ``run_in`` is entered on the thread around the server's whole run (garbage-collector
    settings for a long-lived server); ``config`` goes to :func:`uvicorn_server`.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "envhub-asgi",
        run_in: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
        **config: Any,
    ) -> None:
        self.server = uvicorn_server(app, **config)
        self.socket = bound_socket(host, port)
        self.url = socket_url(self.socket, host)
        self.port = int(self.socket.getsockname()[1])
        self._run_in = run_in
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        with self._run_in():
            self.server.run(sockets=[self.socket])

    def start(self: _Server, timeout_s: float = 30.0) -> _Server:
        """Start serving; raises ``RuntimeError`` (after stopping) if the server is not
        up within ``timeout_s`` or its thread ends first (the app's startup failed)."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop(timeout_s)
                raise RuntimeError(f"{self._thread.name}: uvicorn did not start at {self.url}")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Shut the server down; True when it finished within ``timeout_s`` (the socket is
        closed then, and connections to the port are refused)."""
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            return False
        self.socket.close()
        return True

    def __enter__(self: _Server) -> _Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.asynccontextmanager
async def serve_in_loop(
    app: ASGIApp,
    *,
    sock: socket.socket | None = None,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 30.0,
    **config: Any,
) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn in the running event loop for the block; yields its URL.

    On ``sock`` (already bound: a caller that needs the URL before it builds the app) or
    a free port of ``host``; the socket is closed on exit, once the server has stopped
    (``config``'s ``timeout_graceful_shutdown`` bounds how long open requests are waited
    for). Raises what stopped the server if it fails to start."""
    sock = sock or bound_socket(host)
    server = uvicorn_server(app, **config)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.started:
            if serving.done():
                serving.result()  # raises what stopped it
                raise RuntimeError("uvicorn stopped while starting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start at {socket_url(sock)}")
            await asyncio.sleep(0.005)
        yield socket_url(sock)
    finally:
        server.should_exit = True
        await asyncio.wait({serving})
        sock.close()
        if not serving.cancelled() and (failure := serving.exception()) is not None:
            raise failure


class ClosingStreams:
    """ASGI wrapper that can end the long-lived ``GET`` (server-to-client SSE) streams: after
    :meth:`close` they read ``http.disconnect``, so a server can stop while clients still
    hold one open (uvicorn waits for open responses before it stops). Other requests
    finish on their own and pass through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.closing = asyncio.Event()

    def close(self) -> None:
        self.closing.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return

        async def receive_until_closed() -> Message:
            if not self.closing.is_set():
                received = asyncio.ensure_future(receive())
                closed = asyncio.ensure_future(self.closing.wait())
                done, _ = await asyncio.wait({received, closed},
                                             return_when=asyncio.FIRST_COMPLETED)
                (received if received not in done else closed).cancel()
                if received in done:
                    return received.result()
            return {"type": "http.disconnect"}

        finished = False

        async def watch(message: Message) -> None:
            nonlocal finished
            finished = finished or (message["type"] == "http.response.body"
                                    and not message.get("more_body", False))
            await send(message)

        await self.app(scope, receive_until_closed, watch)
        if not finished and self.closing.is_set():  # the stream was cut: end it cleanly
            await send({"type": "http.response.body", "body": b"", "more_body": False})

"""Local TCP plumbing: a free port, a bound listening-ready socket, and waiting for an HTTP
server to answer.

A server that binds its own port (a subprocess: ``envhub serve``, llama.cpp) is told a
:func:`free_port`; one served from this process gets a :func:`bound_socket` instead, so
nothing can take its port between choosing and binding; one served by uvicorn's own
``run`` is first probed with :func:`check_bindable`, so a busy port is reported before the
server says where it serves. :func:`wait_for_http` is how every
caller waits for a server it started to come up: it polls until a URL answers 200, its
process dies, or time runs out, and leaves the error message to the caller, who knows
what to quote (the server's output).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable

__all__ = ["bound_socket", "check_bindable", "free_port", "wait_for_http", "wait_for_http_async"]


def bound_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A TCP socket bound to ``host`` (IPv4 or IPv6) and ``port`` (0: one the OS picks),
    not listening yet: a server given it serves on it, and its port is known before."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def check_bindable(host: str, port: int) -> None:
    """Raise the ``OSError`` that binding ``host:port`` raises now (``EADDRINUSE``: a server
    listens there; a host that is not this machine's; a privileged port), with the same
    socket options as uvicorn, which would find out only after it has started."""
    bound_socket(host, port).close()


def free_port(host: str = "127.0.0.1", *, low: int = 1, high: int = 65536) -> int:
    """A TCP port of ``host`` that nothing listens on now, in ``[low, high)``.

    For a server in another process, which binds the port itself (another process may
    in theory take it first), and for a URL that must refuse connections. ``low`` and
    ``high`` keep clear of ranges another program allocates from (Ray's worker ports)."""
    while True:
        with bound_socket(host) as sock:
            port = int(sock.getsockname()[1])
        if low <= port < high:
            return port


def wait_for_http(
    url: str,
    *,
    timeout_s: float,
    gone: Callable[[], bool] = lambda: False,
    interval_s: float = 0.1,
) -> bool:
    """Poll ``GET url`` until it answers 200: True then; False once ``gone()`` is true
    (the server's process exited) or ``timeout_s`` has passed, without another try."""
    import httpx

    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=min(5.0, max(timeout_s, 0.1))) as client:
        while not gone():
            with contextlib.suppress(httpx.TransportError):
                if client.get(url).status_code == 200:
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(interval_s)
    return False


async def wait_for_http_async(
    url: str,
    *,
    timeout_s: float,
    gone: Callable[[], bool] = lambda: False,
    interval_s: float = 0.1,
) -> bool:
    """:func:`wait_for_http` from async code: the polls run in a worker thread, so the
    loop keeps running, and a cancelled caller stops them at the next poll."""
    cancelled = threading.Event()
    try:
        return await asyncio.to_thread(
            wait_for_http, url, timeout_s=timeout_s, interval_s=interval_s,
            gone=lambda: cancelled.is_set() or gone(),
        )  # fmt: skip
    finally:
        cancelled.set()

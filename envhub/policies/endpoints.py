"""Load balancing over several OpenAI-compatible base URLs (transport-free: the policy
does the HTTP and reports back; the pool only decides where requests go).

Each request goes to the healthy endpoint with the fewest outstanding requests, never
above the per-endpoint concurrency cap (callers wait for a slot instead). After
``eject_after`` consecutive connection failures (refused, reset, timed out) an endpoint
is ejected, unless it is the last healthy one (ejecting that would only turn slow
failures into instant ones), and a background task calls ``probe(url)`` (the policy's
``GET {base}/models``) every ``probe_interval_s`` until it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

from envhub.errors import InvalidRequest

__all__ = ["Endpoint", "EndpointPool"]


class Endpoint:
    """One base URL with its health counters."""

    def __init__(self, url: str, cap: int | None) -> None:
        self.url = url
        self.cap = cap
        self.outstanding = 0
        self.requests = 0
        self.consecutive_failures = 0
        self.ejected = False
        self.probe_task: asyncio.Task[None] | None = None

    def has_room(self) -> bool:
        return not self.ejected and (self.cap is None or self.outstanding < self.cap)


class EndpointPool:
    """Least-outstanding-requests balancing with a cap, ejection and re-probing."""

    def __init__(
        self,
        urls: list[str],
        probe: Callable[[str], Awaitable[bool]],
        *,
        cap: int | None = None,
        eject_after: int = 3,
        probe_interval_s: float = 2.0,
    ) -> None:
        if not urls:
            raise InvalidRequest("at least one base URL is needed")
        self.endpoints = [Endpoint(u.rstrip("/"), cap) for u in urls]
        self.probe = probe
        self.eject_after = eject_after
        self.probe_interval_s = probe_interval_s
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.on_eject: Callable[[str], None] | None = None  # told each ejected URL

    async def acquire(self) -> Endpoint:
        """The endpoint for the next request, waiting while all are at their cap."""
        while True:
            best: Endpoint | None = None
            for endpoint in self.endpoints:
                if endpoint.has_room() and (
                    best is None or endpoint.outstanding < best.outstanding
                ):
                    best = endpoint
            if best is not None:
                best.outstanding += 1
                best.requests += 1
                return best
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # pass on a wake-up this cancelled caller will not use
                raise

    def release(self, endpoint: Endpoint, *, connection_failed: bool) -> None:
        endpoint.outstanding -= 1
        if connection_failed:
            endpoint.consecutive_failures += 1
            if (
                endpoint.consecutive_failures >= self.eject_after
                and not endpoint.ejected
                and sum(not e.ejected for e in self.endpoints) > 1
            ):
                self._eject(endpoint)
        else:
            endpoint.consecutive_failures = 0
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _eject(self, endpoint: Endpoint) -> None:
        endpoint.ejected = True
        if self.on_eject is not None:
            self.on_eject(endpoint.url)
        endpoint.probe_task = asyncio.get_running_loop().create_task(self._probe(endpoint))
        # waiters blocked on this endpoint's capacity re-check the others (or fail fast)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _probe(self, endpoint: Endpoint) -> None:
        while endpoint.ejected:
            await asyncio.sleep(self.probe_interval_s)
            if await self.probe(endpoint.url):
                endpoint.ejected = False
                endpoint.consecutive_failures = 0
                endpoint.probe_task = None
                self._wake()

    async def aclose(self) -> None:
        for endpoint in self.endpoints:
            if endpoint.probe_task is not None:
                endpoint.probe_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await endpoint.probe_task

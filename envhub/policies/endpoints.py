"""Load balancing over several OpenAI-compatible base URLs (transport-free: the policy
does the HTTP and reports back; the pool only decides where requests go).

Routing (``routing``): in ``least-outstanding`` mode (the default) each request goes to
the healthy endpoint with the fewest outstanding requests. In the sticky modes the
policy passes an affinity key with each request, the episode id (``episode``) or the
GRPO group id (``group``: all samples of a group share their prompt's prefix), and the
key picks its endpoint by rendezvous hashing over the healthy endpoints' URLs, so every
turn of an episode reaches the server that holds its prefix in the KV cache. Rendezvous
hashing moves only the keys of an endpoint that is ejected (each to its next-ranked
endpoint, where it stays) and moves them back when it returns. A key's endpoint that has
``sticky_max_outstanding`` requests in flight (or is at its cap) does not take it: that
request goes least-outstanding instead, so a busy server's queue does not grow while
others idle. A request without a key is balanced least-outstanding in every mode.

Every mode keeps the per-endpoint concurrency cap (callers wait for a slot instead).
After ``eject_after`` consecutive connection failures (refused, reset, timed out) an
endpoint is ejected, unless it is the last healthy one (ejecting that would only turn
slow failures into instant ones), and a background task calls ``probe(url)`` (the
policy's ``GET {base}/models``) every ``probe_interval_s`` until it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Literal, get_args

from envhub.errors import InvalidRequest

__all__ = ["ROUTING_MODES", "Endpoint", "EndpointPool", "RoutingMode"]

_log = logging.getLogger(__name__)

RoutingMode = Literal["least-outstanding", "episode", "group"]
ROUTING_MODES: tuple[RoutingMode, ...] = get_args(RoutingMode)


class Endpoint:
    """One base URL with its health counters."""

    def __init__(self, url: str, cap: int | None) -> None:
        self.url = url
        self._hash_prefix = hashlib.blake2b(url.encode(), digest_size=16)
        self.cap = cap
        self.outstanding = 0
        self.requests = 0
        self.consecutive_failures = 0
        self.ejected = False
        self.probe_task: asyncio.Task[None] | None = None

    def has_room(self) -> bool:
        return not self.ejected and (self.cap is None or self.outstanding < self.cap)

    def weight(self, key: bytes) -> int:
        """This endpoint's rendezvous score for ``key`` (the highest healthy score wins)."""
        digest = self._hash_prefix.copy()
        digest.update(key)
        return int.from_bytes(digest.digest()[:8], "big")


class EndpointPool:
    """Least-outstanding or sticky (rendezvous-hashed) routing with a cap, ejection and
    re-probing (see the module docstring)."""

    def __init__(
        self,
        urls: list[str],
        probe: Callable[[str], Awaitable[bool]],
        *,
        cap: int | None = None,
        eject_after: int = 3,
        probe_interval_s: float = 2.0,
        routing: RoutingMode = "least-outstanding",
        sticky_max_outstanding: int | None = None,
    ) -> None:
        if not urls:
            raise InvalidRequest("at least one base URL is needed")
        if routing not in ROUTING_MODES:
            raise InvalidRequest(
                f"unknown routing {routing!r}; choose one of {', '.join(ROUTING_MODES)}"
            )
        if sticky_max_outstanding is not None and sticky_max_outstanding < 1:
            raise InvalidRequest("sticky_max_outstanding must be at least 1 (or None: no bound)")
        self.endpoints = [Endpoint(u.rstrip("/"), cap) for u in urls]
        self.routing: RoutingMode = routing
        self.sticky_max_outstanding = sticky_max_outstanding
        self.probe = probe
        self.eject_after = eject_after
        self.probe_interval_s = probe_interval_s
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.on_eject: Callable[[str], None] | None = None  # told each ejected URL

    def session_key(self, episode_id: str | None, group_id: str | None) -> str | None:
        """The id that names a request's session, sent to servers and routers and, in the
        sticky modes, the affinity key: the group id in ``group`` mode, else the episode id."""
        return group_id if self.routing == "group" else episode_id

    async def acquire(self, affinity: str | None = None) -> Endpoint:
        """The endpoint for the next request, waiting while all are at their cap.

        ``affinity`` (a :meth:`session_key`) places the request in the sticky modes; in
        ``least-outstanding`` mode it is ignored."""
        sticky = affinity is not None and self.routing != "least-outstanding"
        key = affinity.encode() if affinity is not None and sticky else None
        while True:
            best = self._home(key) if key is not None else None
            if best is None:
                best = self._least_outstanding()
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

    def _home(self, key: bytes) -> Endpoint | None:
        """The key's rendezvous endpoint among the healthy ones, if it may take one more."""
        home: Endpoint | None = None
        best_weight = -1
        for endpoint in self.endpoints:
            if not endpoint.ejected:
                weight = endpoint.weight(key)
                if weight > best_weight:
                    home, best_weight = endpoint, weight
        if home is None or not home.has_room():
            return None
        bound = self.sticky_max_outstanding
        return home if bound is None or home.outstanding < bound else None

    def _least_outstanding(self) -> Endpoint | None:
        best: Endpoint | None = None
        for endpoint in self.endpoints:
            if endpoint.has_room() and (best is None or endpoint.outstanding < best.outstanding):
                best = endpoint
        return best

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
            try:
                answered = await self.probe(endpoint.url)
            except Exception:  # a probe that breaks must not leave the endpoint out for good
                _log.warning("probe of %s failed; probing again", endpoint.url, exc_info=True)
                continue
            if answered:
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

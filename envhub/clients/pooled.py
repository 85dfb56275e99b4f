"""``PooledEnvironment``: one environment served by several ``envhub serve`` replicas, as
one :class:`~envhub.protocol.EnvironmentClient`.

Each session is opened on the least-loaded healthy replica and pinned there for its whole
life: the replicas share nothing, so a session's steps must reach the process that holds
it. Placement is the power of two choices (Mitzenmacher): two random healthy replicas,
the one with the lower load wins, where load is open sessions over the replica's
``max_sessions``. Open sessions are this client's own (exact, updated at every open and
close) plus the other clients' (the server's ``/health`` count at the last probe, minus
ours then). Two choices instead of the global minimum keep many clients from herding onto
the same replica between probes, at the price of a spread that is even only on average.

Failure model. A background task probes ``/health`` every ``health_interval_s`` and asks
the :class:`~envhub.clients.replicas.ReplicaSource` for the current list every
``refresh_s``; a replica that fails a probe, or whose connection fails under a call, gets
no new sessions until a probe succeeds again. The sessions that were on it fail with
:class:`~envhub.errors.ReplicaLost`, an infrastructure error: the rollout masks that
attempt and reruns the episode on a fresh session, which lands on a live replica; the
episode is written once. The data plane is the replica's own WebSocket/HTTP API
(:class:`~envhub.clients.remote.RemoteEnvironment`, one per replica): the pool adds a choice at
open and nothing per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import httpx

from envhub.clients.remote import RemoteEnvironment, RemoteSession, SessionTransport
from envhub.clients.replicas import ReplicaAddress, ReplicaSource, StaticReplicas
from envhub.errors import CapacityError, EnvhubError, FleetError, RemoteError, ReplicaLost
from envhub.protocol import ClosingOnExit, OpeningSession, SessionHandle
from envhub.task import Task
from envhub.types import (
    CloseResult,
    EnvironmentInfo,
    Health,
    SessionInfo,
    SessionStart,
    StepResult,
    ToolCall,
)

if TYPE_CHECKING:
    from envhub.clients._http_transports import HttpEngine

__all__ = ["PinnedSession", "PooledEnvironment", "ReplicaState"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_UNKNOWN_CAPACITY = 4096  # `envhub serve`'s default --max-sessions, until a probe says


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica as the pool sees it (:meth:`PooledEnvironment.replica_states`)."""

    replica_id: str
    url: str
    node_id: str | None
    healthy: bool
    open_sessions: int
    server_sessions: int
    max_sessions: int
    opened: int
    lost: int


class _Replica:
    """A replica's client and the pool's bookkeeping about it."""

    def __init__(self, address: ReplicaAddress, client: RemoteEnvironment) -> None:
        self.address = address
        self.client = client
        self.open = 0  # this pool's sessions on it
        self.reported = 0  # the server's open sessions at the last probe (every client's)
        self.reported_mine = 0  # self.open at that probe
        self.capacity = 0  # the server's max_sessions (0 until a probe)
        self.healthy = True  # optimistic until a probe or a call says otherwise
        self.retired = False  # the source no longer lists it: no new sessions
        self.opened = 0
        self.lost = 0

    def load(self) -> float:
        others = max(0, self.reported - self.reported_mine)
        return (self.open + others) / (self.capacity or _UNKNOWN_CAPACITY)

    def state(self) -> ReplicaState:
        a = self.address
        return ReplicaState(
            replica_id=a.replica_id, url=a.url, node_id=a.node_id, healthy=self.healthy,
            open_sessions=self.open, server_sessions=self.reported, max_sessions=self.capacity,
            opened=self.opened, lost=self.lost,
        )  # fmt: skip


def _unreachable(exc: BaseException) -> bool:
    """The call could not reach the replica (refused, dropped, timed out): the replica,
    not the request, is the problem."""
    return isinstance(exc, RemoteError) and exc.code == "unreachable"


class PinnedSession(ClosingOnExit):
    """A session on one replica of a pool: every call goes to that replica. A call that
    cannot reach it raises :class:`~envhub.errors.ReplicaLost` (and takes the replica out
    of rotation); the session's slot on the replica is released once, at close or abort."""

    __slots__ = ("_inner", "_lost", "_pool", "_released", "_replica")

    def __init__(self, inner: RemoteSession, replica: _Replica, pool: PooledEnvironment) -> None:
        self._inner = inner
        self._replica = replica
        self._pool = pool
        self._released = False
        self._lost = False

    @property
    def session_id(self) -> str:
        return self._inner.session_id

    @property
    def served_by(self) -> str | None:
        return self._replica.address.replica_id

    async def reset(self) -> SessionStart:
        return await self._guarded(self._inner.reset())

    async def step(
        self,
        tool_calls: Sequence[ToolCall | dict[str, Any]],
        content: str | None = None,
        request_id: str | None = None,
    ) -> StepResult:
        return await self._guarded(self._inner.step(tool_calls, content, request_id))

    async def fork(self, n: int = 1, *, fork_id: str | None = None) -> list[PinnedSession]:
        """The children live on this session's replica (they hold its state), counted in
        its load; a full replica refuses them with :class:`~envhub.errors.CapacityError`."""
        children = await self._guarded(self._inner.fork(n, fork_id=fork_id))
        self._replica.open += len(children)
        self._replica.opened += len(children)
        return [PinnedSession(child, self._replica, self._pool) for child in children]

    async def close(self) -> CloseResult:
        try:
            return await self._guarded(self._inner.close())
        finally:
            self._release()

    async def abort(self) -> None:
        try:
            if self._lost:  # nothing left to free on the replica; no call that would fail
                await self._inner.forget()
            else:  # a replica that stopped answering must not hold the abort for long
                await asyncio.wait_for(self._inner.abort(), self._pool.abort_timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            self._release()

    async def info(self) -> SessionInfo:
        return await self._guarded(self._inner.info())

    async def _guarded(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except RemoteError as exc:
            if not _unreachable(exc):
                raise
            self._lost = True
            self._replica.lost += 1
            self._pool._mark_down(self._replica, str(exc))
            raise ReplicaLost(
                f"replica {self.served_by} of {self._pool.name} was lost under session "
                f"{self.session_id}: {exc}"
            ) from exc

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._replica.open -= 1


class PooledEnvironment:
    """Environment ``env`` on the replicas ``source`` lists (or on a list of server URLs),
    with ``options``: an :class:`~envhub.protocol.EnvironmentClient`.

    ``await env.open(task_id)`` starts the session on a replica chosen as the module says
    and returns a :class:`PinnedSession`. When no replica is healthy, ``open`` waits up to
    ``wait_for_replica_s`` for one (a restarting replica re-registers), then raises
    :class:`~envhub.errors.FleetError`; a source that lists no replica at all fails at
    once. ``token``, ``timeout``, ``transport``, ``http`` and ``max_connections`` are
    :class:`~envhub.clients.remote.RemoteEnvironment`'s, per replica; ``retries`` is low by
    default, since a failing replica is better left for another than retried.
    """

    def __init__(
        self,
        source: ReplicaSource | Sequence[str],
        env: str,
        options: dict[str, Any] | None = None,
        *,
        token: str | None = None,
        timeout: float = 120.0,
        transport: SessionTransport | None = None,
        http: HttpEngine = "auto",
        max_connections: int | None = None,
        retries: int = 1,
        backoff_s: float = 0.1,
        health_interval_s: float = 1.0,
        health_timeout_s: float = 2.0,
        refresh_s: float = 2.0,
        wait_for_replica_s: float = 30.0,
        abort_timeout_s: float = 5.0,
        seed: int | None = None,
    ) -> None:
        self.source: ReplicaSource = (
            source if isinstance(source, ReplicaSource) else StaticReplicas(source)
        )
        self.name = env
        self.options = dict(options or {})
        self._token = token
        self._client_args: dict[str, Any] = {
            "token": token, "timeout": timeout, "transport": transport, "http": http,
            "max_connections": max_connections, "retries": retries, "backoff_s": backoff_s,
        }  # fmt: skip
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self.refresh_s = refresh_s
        self.wait_for_replica_s = wait_for_replica_s
        self.abort_timeout_s = abort_timeout_s
        self._random = random.Random(seed)
        self._replicas: dict[str, _Replica] = {}  # by URL: a restarted replica is a new one
        self._source_error: str | None = None
        self._refreshed_at = float("-inf")
        self._started: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self._probe: httpx.AsyncClient | None = None
        self._info: EnvironmentInfo | None = None

    # -- EnvironmentClient ---------------------------------------------------------------

    @property
    def version(self) -> str:
        return self._info.version if self._info is not None else "unknown"

    def open(
        self,
        task_id: str | None = None,
        *,
        session_id: str | None = None,
        seed: int | None = None,
    ) -> OpeningSession:
        return OpeningSession(lambda: self._create(task_id, session_id, seed))

    async def info(self) -> EnvironmentInfo:
        self._info = await self._on_any_replica(lambda client: client.info())
        return self._info

    async def task_ids(self, split: str | None = None) -> list[str]:
        return await self._on_any_replica(lambda client: client.task_ids(split))

    async def task(self, task_id: str) -> Task:
        """Not available remotely (see :meth:`RemoteEnvironment.task`)."""
        raise NotImplementedError(
            f"a pool of {self.name} servers does not publish tasks; it gives task ids "
            "(task_ids) and each session's first messages"
        )

    async def aclose(self) -> None:
        if self._started is not None:
            self._started.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._started
            self._started = None
        replicas, self._replicas = list(self._replicas.values()), {}
        for replica in replicas:
            await replica.client.aclose()
        if self._probe is not None:
            await self._probe.aclose()
            self._probe = None
        await self.source.aclose()

    async def __aenter__(self) -> PooledEnvironment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- what the pool knows ---------------------------------------------------------------

    async def replica_states(self) -> list[ReplicaState]:
        """Every replica the pool knows, after a fresh look at the source and a probe."""
        await self._ensure_started()
        await self._refresh()
        await self._probe_all()
        return [replica.state() for replica in self._replicas.values()]

    # -- placement -------------------------------------------------------------------------

    async def _create(
        self, task_id: str | None, session_id: str | None, seed: int | None
    ) -> PinnedSession:
        await self._ensure_started()
        tried: set[str] = set()
        while True:
            replica = await self._choose(tried)
            replica.open += 1
            try:
                opened = await replica.client.open(task_id, session_id=session_id, seed=seed)
                inner = cast(RemoteSession, opened)  # what a RemoteEnvironment opens
            except BaseException as exc:
                replica.open -= 1
                if _unreachable(exc):
                    self._mark_down(replica, str(exc))
                elif not isinstance(exc, CapacityError):
                    raise
                tried.add(replica.address.url)  # full or down: another replica may take it
                continue
            replica.opened += 1
            return PinnedSession(inner, replica, self)

    async def _choose(self, tried: set[str]) -> _Replica:
        """Two random candidates, the less loaded wins; waits for a healthy replica up to
        ``wait_for_replica_s`` when there is none."""
        deadline = time.monotonic() + self.wait_for_replica_s
        while True:
            candidates = [
                r for r in self._replicas.values()
                if r.healthy and not r.retired and r.address.url not in tried
            ]  # fmt: skip
            if len(candidates) == 1:
                return candidates[0]
            if candidates:
                first, second = self._random.sample(candidates, 2)
                return first if first.load() <= second.load() else second
            if any(r.healthy and not r.retired for r in self._replicas.values()):
                # healthy ones are all in `tried`: an unreachable one would be marked down
                raise CapacityError(f"every replica of {self.name} is full; retry later")
            if time.monotonic() >= deadline:
                raise FleetError(self._no_replica_message())
            tried.clear()  # a replica that was down may be back: all are candidates again
            await asyncio.sleep(min(0.25, self.health_interval_s))
            await self._refresh(force=True)
            await self._probe_all()

    def _no_replica_message(self) -> str:
        where = self.source.description
        if self._source_error is not None:
            return f"no replica of {self.name} is reachable: {self._source_error}"
        if not self._replicas:
            return f"no replica of {self.name} in {where}"
        return (
            f"no healthy replica of {self.name} within {self.wait_for_replica_s:g}s "
            f"({len(self._replicas)} known in {where})"
        )

    def _mark_down(self, replica: _Replica, why: str) -> None:
        if replica.healthy:
            logger.warning("replica %s of %s is down: %s", replica.address.replica_id,
                           self.name, why)
        replica.healthy = False

    async def _on_any_replica(self, call: Callable[[RemoteEnvironment], Awaitable[T]]) -> T:
        """``call`` on the least-loaded healthy replica, then the next if it is down."""
        await self._ensure_started()
        tried: set[str] = set()
        while True:
            replica = await self._choose(tried)
            try:
                return await call(replica.client)
            except EnvhubError as exc:
                if not _unreachable(exc):
                    raise
                self._mark_down(replica, str(exc))
                tried.add(replica.address.url)

    # -- the source and the probes -----------------------------------------------------------

    async def _ensure_started(self) -> None:
        """First use: read the source (none listed is an error at once), probe, and start
        the maintenance task; concurrent first calls wait for one start."""
        if self._started is not None:
            return
        async with self._start_lock:
            if self._started is not None:
                return
            if self._probe is None:
                self._probe = httpx.AsyncClient(
                    timeout=self.health_timeout_s,
                    headers={"authorization": f"Bearer {self._token}"} if self._token else None,
                )
            await self._refresh(force=True)
            if not self._replicas:
                raise FleetError(self._no_replica_message())
            await self._probe_all()
            self._started = asyncio.ensure_future(self._maintain())

    async def _maintain(self) -> None:
        """Probe every replica each ``health_interval_s``, re-read the source each
        ``refresh_s``; runs until :meth:`aclose`."""
        while True:
            await asyncio.sleep(self.health_interval_s)
            try:
                await self._refresh()
                await self._probe_all()
            except Exception:  # the loop must outlive any one bad round
                logger.exception("pool maintenance of %s failed; retrying", self.name)

    async def _refresh(self, force: bool = False) -> None:
        """Take in the source's current list: new replicas join, unlisted ones retire
        (no new sessions; dropped once their sessions are gone)."""
        if not force and time.monotonic() - self._refreshed_at < self.refresh_s:
            return
        self._refreshed_at = time.monotonic()
        try:
            addresses = await self.source.replicas()
        except FleetError as exc:  # keep serving from what is known
            self._source_error = str(exc)
            return
        self._source_error = None
        listed = {address.url: address for address in addresses}
        for url, address in listed.items():
            if url not in self._replicas:
                client = RemoteEnvironment(url, self.name, self.options, **self._client_args)
                self._replicas[url] = _Replica(address, client)
        for url, replica in list(self._replicas.items()):
            replica.retired = url not in listed
            if replica.retired and replica.open <= 0:
                del self._replicas[url]
                await replica.client.aclose()

    async def _probe_all(self) -> None:
        await asyncio.gather(*(self._probe_one(r) for r in list(self._replicas.values())))

    async def _probe_one(self, replica: _Replica) -> None:
        assert self._probe is not None
        try:
            answer = await self._probe.get(f"{replica.address.url}/health")
            answer.raise_for_status()
            health = Health.model_validate_json(answer.content)
        except (httpx.HTTPError, ValueError) as exc:  # pydantic's ValidationError included
            self._mark_down(replica, f"/health failed: {exc!r}")
            return
        replica.reported = health.sessions
        replica.reported_mine = replica.open
        replica.capacity = health.max_sessions
        if not replica.healthy:
            logger.info("replica %s of %s is back", replica.address.replica_id, self.name)
        replica.healthy = True


if TYPE_CHECKING:  # the protocols, checked statically against this implementation
    from envhub.protocol import EnvironmentClient

    _client: type[EnvironmentClient] = PooledEnvironment
    _session: type[SessionHandle] = PinnedSession

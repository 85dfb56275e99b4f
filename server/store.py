"""Hosted environments and the sessions opened on them.

The store owns every server-side session and has one method per verb (``create``,
``step``, ``fork``, ``close``, ``info``) taking the request's wire model: the FastAPI routes, the
session fast path and the WebSocket handler all call these, so a verb behaves the same
whichever door it came through. Each call goes straight to the in-process
:class:`~envhub.runtime.session.Session` (no second dispatch path); the store only adds what
HTTP needs: ids and idempotent creation, a capacity limit, keeping closed results for
retried closes, the idle-session reaper, and metrics.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from envhub._util.sized_lru import SizedLRU
from envhub.clients.local import LocalEnvironment
from envhub.errors import (
    CapacityError,
    EnvhubError,
    InvalidRequest,
    RegistryError,
    SessionNotFound,
)
from envhub.runtime.client_options import client_option_schemas, validate_client_options
from envhub.runtime.session import Session
from envhub.server.metrics import ServerMetrics
from envhub.types import (
    CloseResult,
    CreateSession,
    EnvironmentInfo,
    ForkRequest,
    ForkResult,
    SessionInfo,
    SessionStart,
    StepRequest,
    StepResult,
)

__all__ = ["HostedEnvironment", "SessionStore"]

log = logging.getLogger("envhub.server")

_MAX_VARIANTS = 32  # distinct client option sets kept built per environment
_MAX_VARIANT_BYTES = 256 * 2**20  # and the memory their task sets may hold together
_CONCURRENT_BUILDS = 2  # variant builds running at once per environment


class HostedEnvironment:
    """One environment the server hosts, plus the variants clients asked for with ``options``.

    Client options are checked against the environment's declared client-settable
    options before anything is built (:mod:`envhub.runtime.client_options`). Building a variant
    constructs the environment and loads its tasks, which can take seconds of CPU, so it
    runs in a worker thread, a few at a time; concurrent requests for the same option
    set wait for one build. Built variants are kept by count and by task-set memory.
    """

    def __init__(self, name: str, base: LocalEnvironment) -> None:
        self.name = name
        self.base = base
        self._variants: SizedLRU[str, LocalEnvironment] = SizedLRU(
            max_entries=_MAX_VARIANTS, max_bytes=_MAX_VARIANT_BYTES
        )
        self._building: dict[str, asyncio.Future[LocalEnvironment]] = {}
        self._build_slots = asyncio.Semaphore(_CONCURRENT_BUILDS)
        self._info: EnvironmentInfo | None = None
        client_option_schemas(base.env_class)  # a bad declaration stops the server at start

    async def warm(self) -> None:
        """Load the hosted option set's tasks before the first request needs them."""
        await self.info()

    async def info(self) -> EnvironmentInfo:
        """The environment's own :meth:`~envhub.clients.local.LocalEnvironment.info` under the name
        clients use here; built once."""
        if self._info is None:
            info = await self.base.info()
            self._info = info.model_copy(update={"name": self.name})
        return self._info

    async def variant(self, options: dict[str, Any] | None) -> LocalEnvironment:
        """The environment with the client's ``options`` (validated against the declared
        client-settable ones) merged over the hosted ones; built once, kept while it fits."""
        if not options:
            return self.base
        chosen = validate_client_options(self.base.env_class, options, env=self.name)
        merged = {**self.base.options, **chosen}
        if merged == self.base.options:
            return self.base
        key = json.dumps(merged, sort_keys=True, default=repr)
        built = self._variants.get(key)
        if built is not None:
            return built
        future = self._building.get(key)
        if future is None:
            future = asyncio.ensure_future(self._build_variant(key, merged))
            self._building[key] = future
            future.add_done_callback(lambda _: self._building.pop(key, None))
        return await asyncio.shield(future)

    async def _build_variant(self, key: str, options: dict[str, Any]) -> LocalEnvironment:
        async with self._build_slots:
            env = await asyncio.to_thread(self._build, options)
        self._variants.put(key, env, env.tasks_bytes)
        return env

    def _build(self, options: dict[str, Any]) -> LocalEnvironment:
        try:
            env = LocalEnvironment(self.base.env_class, options, self.base.budgets)
            env.tasks  # noqa: B018 - load now, in this thread, not on the event loop later
        except EnvhubError:
            raise
        except Exception as exc:  # the environment's own checks refused a client value
            message = f"bad options for {self.name}: {type(exc).__name__}: {exc}"
            raise InvalidRequest(message) from exc
        return env


class _Counts(NamedTuple):
    """The session counters a step's metrics are the growth of, read before the step (a
    tuple: copying the pydantic :class:`EpisodeMetrics` cost more than the step's other
    bookkeeping)."""

    tool_calls: int
    env_s: float
    tool_errors: int
    errors_by_kind: dict[str, int]


@dataclass(eq=False)
class _Entry:
    """A session plus the bookkeeping only the server needs."""

    session: Session
    env: str
    last_seen: float = field(default_factory=time.monotonic)
    busy: int = 0  # requests in flight; the reaper never aborts a busy session
    parent: str | None = None  # the session it was forked from
    forgotten: asyncio.Event = field(default_factory=asyncio.Event)  # set once let go of


class SessionStore:
    """Sessions by id. One per app; all methods run on the server's event loop."""

    def __init__(
        self,
        envs: dict[str, LocalEnvironment],
        *,
        max_sessions: int,
        session_ttl_s: float,
        metrics: ServerMetrics,
    ) -> None:
        self.envs = {name: HostedEnvironment(name, env) for name, env in envs.items()}
        self.max_sessions = max_sessions
        self.session_ttl_s = session_ttl_s
        self.metrics = metrics
        self._open: dict[str, _Entry] = {}
        # Closed sessions stay readable until the TTL so that a retried close gets the
        # same result; oldest first, bounded like the open ones.
        self._closed: OrderedDict[str, _Entry] = OrderedDict()
        self._creating: dict[str, asyncio.Future[SessionStart]] = {}
        self._forking = 0  # children of forks in flight

    @property
    def open_sessions(self) -> int:
        """Sessions open or being created (forks' children included): what counts
        against ``max_sessions``."""
        return len(self._open) + len(self._creating) + self._forking

    # -- environments --------------------------------------------------------------------

    def hosted(self, name: str) -> HostedEnvironment:
        try:
            return self.envs[name]
        except KeyError:
            hosted = ", ".join(sorted(self.envs))
            raise RegistryError(
                f"environment {name!r} is not hosted here (hosted: {hosted})"
            ) from None

    # -- sessions ------------------------------------------------------------------------

    async def create(self, request: CreateSession) -> SessionStart:
        """Open a session; with a known ``session_id`` return that session's start instead."""
        env, session_id = request.env, request.session_id
        hosted = self.hosted(env)
        if session_id is not None:
            existing = self._open.get(session_id) or self._closed.get(session_id)
            if existing is not None:
                if existing.env != env:
                    raise InvalidRequest(
                        f"session id {session_id!r} is in use by environment {existing.env!r}"
                    )
                existing.last_seen = time.monotonic()
                return await existing.session.reset()
            pending = self._creating.get(session_id)
            if pending is not None:
                return await asyncio.shield(pending)
        if self.open_sessions >= self.max_sessions:
            raise CapacityError(
                f"the server holds its maximum of {self.max_sessions} sessions; retry later"
            )
        sid = session_id or uuid.uuid4().hex
        # The start runs as its own task: a client that disconnects mid-create does not
        # cancel it, so its retry with the same id finds the session.
        started = asyncio.ensure_future(
            self._start(hosted, sid, request.task_id, request.seed, request.options)
        )
        self._creating[sid] = started
        return await asyncio.shield(started)

    async def _start(
        self,
        hosted: HostedEnvironment,
        sid: str,
        task_id: str | None,
        seed: int | None,
        options: dict[str, Any] | None,
    ) -> SessionStart:
        try:
            local = await hosted.variant(options)
            # a plugin's constructor may block (files, a Docker call): not on the event loop
            session = await asyncio.to_thread(local.new_session, task_id, seed=seed, session_id=sid)
            try:
                start = await session.reset()
            except BaseException:
                await session.abort()
                raise
            self._open[sid] = _Entry(session, hosted.name)
        finally:
            del self._creating[sid]
        self.metrics.sessions_created.labels(hosted.name).inc()
        self.metrics.sessions_open.labels(hosted.name).inc()
        return start

    def _entry(self, session_id: str, *, touch: bool = True) -> _Entry:
        entry = self._open.get(session_id)
        if entry is None:
            entry = self._closed.get(session_id)
            if entry is None:
                raise SessionNotFound(
                    f"no session {session_id!r} (never created, or reaped after being idle)"
                )
            if touch:
                self._closed.move_to_end(session_id)  # keeps the expiry scan in last-seen order
        if touch:
            entry.last_seen = time.monotonic()
        return entry

    async def step(self, session_id: str, request: StepRequest) -> StepResult:
        entry = self._entry(session_id)
        counts = entry.session.metrics
        before = _Counts(counts.tool_calls, counts.env_s, counts.tool_errors,
                         dict(counts.errors_by_kind))
        entry.busy += 1
        started = time.perf_counter()
        try:
            result = await entry.session.step(
                request.tool_calls, request.content, request.request_id
            )
        finally:
            entry.busy -= 1
            entry.last_seen = time.monotonic()
        self._record_step(entry, time.perf_counter() - started, before)
        return result

    async def fork(self, session_id: str, request: ForkRequest) -> ForkResult:
        """Fork a session into ``request.n`` children held here like any session (each
        counted against ``max_sessions``: :class:`~envhub.errors.CapacityError` when they
        would not fit). The children are ``{fork_id}-{i}`` (a ``fork_id`` is drawn when
        the request has none); repeating a ``fork_id`` returns the same children."""
        entry = self._entry(session_id)
        fork_id = request.fork_id or uuid.uuid4().hex
        ids = [f"{fork_id}-{i}" for i in range(request.n)]
        known = [self._open.get(i) or self._closed.get(i) for i in ids]
        if all(k is not None and k.parent == session_id for k in known):
            return ForkResult(session_ids=ids)  # a retry of a fork that is done
        taken = next((i for i, k in zip(ids, known, strict=True)
                      if k is not None and k.parent != session_id), None)
        if taken is not None:
            raise InvalidRequest(f"session id {taken!r} is in use; choose another fork_id")
        if self.open_sessions + request.n > self.max_sessions:
            raise CapacityError(
                f"forking {request.n} {'child' if request.n == 1 else 'children'} would pass "
                f"the server's maximum of {self.max_sessions} sessions "
                f"({self.open_sessions} open); retry later"
            )
        # Its own task, like a create: a client that leaves mid-fork leaves no half-made
        # children, and its retry with the same fork_id gets the finished ones.
        forking = asyncio.ensure_future(self._fork(entry, session_id, request.n, fork_id))
        return await asyncio.shield(forking)

    async def _fork(self, entry: _Entry, parent: str, n: int, fork_id: str) -> ForkResult:
        self._forking += n
        entry.busy += 1
        try:
            children = await entry.session.fork(n, fork_id=fork_id)
        finally:
            self._forking -= n
            entry.busy -= 1
            entry.last_seen = time.monotonic()
        for child in children:
            if child.session_id not in self._open and child.session_id not in self._closed:
                self._open[child.session_id] = _Entry(child, entry.env, parent=parent)
                self.metrics.sessions_created.labels(entry.env).inc()
                self.metrics.sessions_open.labels(entry.env).inc()
        return ForkResult(session_ids=[child.session_id for child in children])

    def _record_step(self, entry: _Entry, seconds: float, before: _Counts) -> None:
        m, after = self.metrics.step_metrics(entry.env), entry.session.metrics
        m.steps.inc()
        m.step_seconds.observe(seconds)
        calls = after.tool_calls - before.tool_calls
        if calls:
            m.tool_calls.inc(calls)
            for _ in range(calls):
                m.tool_seconds.observe((after.env_s - before.env_s) / calls)
        if after.tool_errors != before.tool_errors:
            for kind, count in after.errors_by_kind.items():
                new = count - before.errors_by_kind.get(kind, 0)
                if new:
                    self.metrics.tool_errors.labels(entry.env, kind).inc(new)

    async def close(self, session_id: str) -> CloseResult:
        """Score and free the session; a repeated close returns the stored result."""
        entry = self._entry(session_id)
        entry.busy += 1
        try:
            return await entry.session.close()
        finally:
            entry.busy -= 1
            if entry.session.closed and self._open.pop(session_id, None) is not None:
                self._remember_closed(session_id, entry)
                self.metrics.sessions_closed.labels(entry.env).inc()
                self.metrics.sessions_open.labels(entry.env).dec()

    def _remember_closed(self, session_id: str, entry: _Entry) -> None:
        self._closed[session_id] = entry
        while len(self._closed) > self.max_sessions:
            self._closed.popitem(last=False)[1].forgotten.set()

    def info(self, session_id: str) -> SessionInfo:
        """The state summary; reading it does not count as activity for the reaper."""
        return self._entry(session_id, touch=False).session.summary()

    async def wait_forgotten(self, session_id: str) -> None:
        """Return once the store lets go of session ``session_id`` (at once if it holds no
        such session): reaped after being idle, its closed result expired (idle past the
        TTL) or displaced, or aborted at shutdown. A door that keeps state per session (an
        MCP session) drops it then, so the store's capacity and TTL bound that state too."""
        entry = self._open.get(session_id) or self._closed.get(session_id)
        if entry is not None:
            await entry.forgotten.wait()

    # -- idle sessions ---------------------------------------------------------------------

    async def reap(self) -> int:
        """Abort sessions idle past the TTL (freeing their sandboxes) and forget old results."""
        now = time.monotonic()
        idle = [
            (sid, e) for sid, e in self._open.items()
            if e.busy == 0 and now - e.last_seen > self.session_ttl_s
        ]
        for sid, entry in idle:
            del self._open[sid]
            entry.forgotten.set()
            self.metrics.sessions_reaped.labels(entry.env).inc()
            self.metrics.sessions_open.labels(entry.env).dec()
        await asyncio.gather(*(e.session.abort() for _, e in idle), return_exceptions=True)
        while self._closed:
            sid, oldest = next(iter(self._closed.items()))
            if now - oldest.last_seen <= self.session_ttl_s:
                break
            del self._closed[sid]
            oldest.forgotten.set()
        if idle:
            log.info("reaped %d idle sessions", len(idle))
        return len(idle)

    async def run_reaper(self) -> None:
        """Reap forever, checking a few times per TTL (at most every 10 s)."""
        interval = min(max(self.session_ttl_s / 4, 0.05), 10.0)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reap()
            except Exception:  # the reaper must outlive any one bad session
                log.exception("session reaper failed")

    async def shutdown(self) -> None:
        """Abort every open session (server stop)."""
        entries = list(self._open.values())
        self._open.clear()
        for entry in entries:
            entry.forgotten.set()
        await asyncio.gather(*(e.session.abort() for e in entries), return_exceptions=True)

"""The FastAPI application that hosts environments over HTTP: :func:`create_app` (prepared
environments or ids), :func:`build_app` (ids with options and budgets: what ``envhub
serve`` and every fleet replica run), and :func:`raise_open_files_limit` for the process
that serves it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from envhub.clients.local import LocalEnvironment, make
from envhub.server.auth import BearerAuth
from envhub.server.errors import install_error_handlers
from envhub.server.fastpath import SessionFastPath
from envhub.server.hosts import HostAllowList, TrustedHosts
from envhub.server.limits import BodySizeLimit, SizeLimit
from envhub.server.metrics import ServerMetrics
from envhub.server.routes import environments_router, service_router, sessions_router
from envhub.server.store import HostedEnvironment, SessionStore
from envhub.server.websocket import SessionWebSocket

__all__ = ["build_app", "create_app", "raise_open_files_limit"]

OPEN_PATHS = frozenset({"/health"})

log = logging.getLogger("envhub.server")


def _hosted(
    envs: Sequence[str] | dict[str, LocalEnvironment],
    options: Sequence[dict[str, Any]] | None = None,
    budgets: dict[str, Any] | None = None,
) -> dict[str, LocalEnvironment]:
    """Environments by the name clients use: the dict key, or the name of each id made
    (:func:`envhub.make`) with its ``options`` (one dict per id) and the ``budgets``
    overrides. Two ids that name one environment are a ``ValueError``: clients could
    reach only one of them."""
    if isinstance(envs, dict):
        return dict(envs)
    hosted: dict[str, LocalEnvironment] = {}
    per_env: Sequence[dict[str, Any]] = [{} for _ in envs] if options is None else options
    for env_id, env_options in zip(envs, per_env, strict=True):
        local = make(env_id, **(budgets or {}), **env_options)
        if local.name in hosted:
            raise ValueError(f"environment {local.name!r} is listed twice")
        hosted[local.name] = local
    return hosted


async def _release_shared(hosted: Iterable[HostedEnvironment]) -> None:
    """At shutdown, once the sessions are gone: free what the environments keep for all
    episodes (warm sandbox pools, browsers). uvicorn re-raises SIGTERM/SIGINT after the
    lifespan, so ``atexit`` hooks never run; this is where such resources go."""
    envs = [h.base for h in hosted]
    results = await asyncio.gather(*(env.aclose() for env in envs), return_exceptions=True)
    for env, result in zip(envs, results, strict=True):
        if isinstance(result, BaseException):
            log.error("releasing %s's shared resources failed", env.name, exc_info=result)


def create_app(
    envs: Sequence[str] | dict[str, LocalEnvironment],
    *,
    max_sessions: int = 4096,
    session_ttl_s: float = 600.0,
    max_body_bytes: int = 4 * 1024 * 1024,
    token: str | None = None,
    mcp: bool = False,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
) -> FastAPI:
    """An app hosting ``envs`` (ids to load with their default options, or prepared
    ``LocalEnvironment`` objects by name, e.g. from ``envhub.make`` with budgets).

    ``token`` set: every route but ``/health``, and every WebSocket handshake, needs
    ``Authorization: Bearer <token>``. ``max_body_bytes`` bounds a request body and a
    WebSocket message alike. Idle sessions are aborted after ``session_ttl_s`` by a reaper
    running with the app. The session calls are also served over ``WS /v1/ws`` and
    ``WS /v1/sessions/{id}/ws`` (``websocket``). ``mcp``: each environment is also a
    Streamable HTTP MCP server at ``/mcp/{env}`` and ``/{env}/mcp`` (and ``/mcp`` when
    one is hosted), one MCP session per envhub session (:mod:`envhub.server.mcp`; needs
    the ``mcp`` extra).

    Every door serves only requests whose ``Host`` names a loopback name, ``host`` (the
    address the server listens on) or one of ``allowed_hosts``, and whose ``Origin``, when
    a browser sends one, is one of those or the request's own
    (:mod:`envhub.server.hosts`: DNS rebinding); listening on every address with no
    ``allowed_hosts`` takes any ``Host``. ``"*"`` in ``allowed_hosts`` turns the check off.
    """
    from envhub import __version__

    if max_sessions < 1 or session_ttl_s <= 0 or max_body_bytes < 1:
        raise ValueError("max_sessions, session_ttl_s and max_body_bytes must be positive")
    metrics = ServerMetrics()
    store = SessionStore(
        _hosted(envs), max_sessions=max_sessions, session_ttl_s=session_ttl_s, metrics=metrics
    )
    mcp_door = None
    if mcp:
        from envhub.server.mcp import mcp_endpoints

        mcp_door = mcp_endpoints(store, metrics, max_body_bytes)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.gather(*(hosted.warm() for hosted in store.envs.values()))
        reaper = asyncio.create_task(store.run_reaper(), name="envhub-session-reaper")
        try:
            async with mcp_door.running() if mcp_door else contextlib.nullcontext():
                yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await store.shutdown()
            await _release_shared(store.envs.values())

    app = FastAPI(
        title="envhub",
        version=__version__,
        summary="Tool-use environments as HTTP sessions: create, step, close.",
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.metrics = metrics
    install_error_handlers(app)
    for router in (service_router, environments_router, sessions_router):
        app.include_router(router)

    def count_error(code: str) -> None:
        metrics.errors.labels(code).inc()

    # Added last = runs first. The doors (FastAPI routes, the fast path, WebSockets, MCP)
    # sit behind one Host/Origin check, one token check and one size limit, and call the
    # same store methods.
    limit = SizeLimit(max_body_bytes)
    app.add_middleware(SessionFastPath, store=store, metrics=metrics)
    app.add_middleware(SessionWebSocket, store=store, metrics=metrics, limit=limit)
    if mcp_door:
        from envhub.server.mcp import McpDoor

        app.add_middleware(McpDoor, endpoints=mcp_door)
    app.add_middleware(BodySizeLimit, limit=limit, on_error=count_error)
    if token:
        app.add_middleware(BearerAuth, token=token, open_paths=OPEN_PATHS, on_error=count_error)
    app.add_middleware(
        TrustedHosts, allowed=HostAllowList.for_bind(host, allowed_hosts), on_error=count_error
    )
    return app


def build_app(
    envs: Sequence[str],
    options: Sequence[dict[str, Any]] | None = None,
    *,
    max_sessions: int = 4096,
    session_ttl_s: float = 600.0,
    max_body_bytes: int = 4_194_304,
    token: str | None = None,
    max_turns: int | None = None,
    tool_timeout_s: float | None = None,
    episode_timeout_s: float | None = None,
    max_output_chars: int | None = None,
    mcp: bool = False,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
) -> FastAPI:
    """The application ``envhub serve`` runs: each of ``envs`` made with its ``options``
    (one dict per env; default: none) and these budget overrides, hosted by
    :func:`create_app` with the other settings. Fleet replicas build theirs here too, so
    a replica serves exactly what ``envhub serve`` would; its keyword-only parameters are
    the settings a fleet accepts. Raises :class:`~envhub.errors.EnvhubError` or
    ``ValueError`` (an env listed twice, a bad limit) before anything is served."""
    budgets = {
        "max_turns": max_turns,
        "tool_timeout_s": tool_timeout_s,
        "episode_timeout_s": episode_timeout_s,
        "max_output_chars": max_output_chars,
    }
    return create_app(
        _hosted(envs, options, budgets),
        max_sessions=max_sessions,
        session_ttl_s=session_ttl_s,
        max_body_bytes=max_body_bytes,
        token=token,
        mcp=mcp,
        host=host,
        allowed_hosts=allowed_hosts,
    )


def raise_open_files_limit() -> int:
    """Lift the soft file-descriptor limit to the hard one (one socket per connection)
    and return it; thousands of concurrent sessions need thousands of descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 1_048_576 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft

"""The MCP door of the server (``create_app(..., mcp=True)``): ``/mcp/{env}`` (also
``/{env}/mcp``, and ``/mcp`` when one environment is hosted) over the store.

:class:`StoreEnvironment` is the :class:`~envhub.protocol.EnvironmentClient` of one hosted
environment through the :class:`~envhub.server.store.SessionStore`, so MCP sessions are
store sessions like any other door's: counted against ``max_sessions``, listed under
``GET /v1/sessions/{id}``, reaped when idle, and metered per step.
:class:`McpDoor` routes the MCP paths to :class:`~envhub.mcp.http.McpEndpoints`
behind the same bearer token and body-size limit as the other doors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from envhub.errors import EnvhubError, SessionClosed
from envhub.mcp.http import McpEndpoints
from envhub.protocol import ClosingOnExit, OpeningSession
from envhub.runtime.validation import check_session_id, fork_request, invalid_request
from envhub.server.errors import STATUS_BY_CODE
from envhub.server.metrics import ServerMetrics
from envhub.server.store import SessionStore
from envhub.task import Task
from envhub.types import (
    CloseResult,
    CreateSession,
    EnvironmentInfo,
    SessionInfo,
    SessionStart,
    StepRequest,
    StepResult,
    ToolCall,
)

__all__ = ["McpDoor", "StoreEnvironment", "StoreSession", "mcp_endpoints"]


class StoreSession(ClosingOnExit):
    """One store session as a :class:`~envhub.protocol.SessionHandle`."""

    def __init__(self, store: SessionStore, start: SessionStart) -> None:
        self.store = store
        self.start = start
        self.session_id = start.session_id
        self.served_by: str | None = None
        self._aborted = False
        self._closed = False

    async def reset(self) -> SessionStart:
        return self.start

    async def step(
        self,
        tool_calls: Sequence[ToolCall | dict[str, Any]],
        content: str | None = None,
        request_id: str | None = None,
    ) -> StepResult:
        if self._aborted:
            raise SessionClosed(f"session {self.session_id} was aborted")
        try:
            request = StepRequest.model_validate(
                {"tool_calls": list(tool_calls), "content": content, "request_id": request_id}
            )
        except ValidationError as exc:
            raise invalid_request(exc) from None
        return await self.store.step(self.session_id, request)

    async def fork(self, n: int = 1, *, fork_id: str | None = None) -> list[StoreSession]:
        """Children in the store, as ``POST /v1/sessions/{id}/fork`` makes them (the MCP
        door itself offers no fork: an MCP client drives one episode)."""
        if self._aborted:
            raise SessionClosed(f"session {self.session_id} was aborted")
        forked = await self.store.fork(self.session_id, fork_request(n, fork_id))
        return [StoreSession(self.store, self.start.model_copy(update={"session_id": sid}))
                for sid in forked.session_ids]

    async def close(self) -> CloseResult:
        if self._aborted:
            raise SessionClosed(f"session {self.session_id} was aborted, not scored")
        result = await self.store.close(self.session_id)
        self._closed = True
        return result

    async def abort(self) -> None:
        """The store, like the HTTP API, has no unscored delete: the session is closed
        there and its result dropped here (as :meth:`envhub.RemoteSession.abort` does);
        a session closed before keeps its result."""
        if not (self._aborted or self._closed):
            self._aborted = True
            try:
                await self.store.close(self.session_id)
            except EnvhubError:
                pass  # already gone (reaped or shut down): nothing left to free

    async def info(self) -> SessionInfo:
        return self.store.info(self.session_id)


class StoreEnvironment:
    """One hosted environment as an :class:`~envhub.protocol.EnvironmentClient`."""

    def __init__(self, store: SessionStore, name: str) -> None:
        self.store = store
        self.name = name
        self.hosted = store.hosted(name)

    @property
    def version(self) -> str:
        return self.hosted.base.version

    async def info(self) -> EnvironmentInfo:
        return await self.hosted.info()

    async def task_ids(self, split: str | None = None) -> list[str]:
        return await self.hosted.base.task_ids(split)

    async def task(self, task_id: str) -> Task:
        raise NotImplementedError("a hosted environment does not hand out its tasks' gold data")

    def open(
        self,
        task_id: str | None = None,
        *,
        session_id: str | None = None,
        seed: int | None = None,
    ) -> OpeningSession:
        async def start() -> StoreSession:
            if session_id is not None:
                check_session_id(session_id)  # refused as the HTTP API refuses it
            request = CreateSession(env=self.name, task_id=task_id, seed=seed,
                                    session_id=session_id)
            return StoreSession(self.store, await self.store.create(request))

        return OpeningSession(start)

    async def aclose(self) -> None:
        """The app's lifespan releases the hosted environments; nothing is owned here."""


def mcp_endpoints(store: SessionStore, metrics: ServerMetrics,
                  max_message_bytes: int = 16 * 1024 * 1024) -> McpEndpoints:
    """``/mcp/{env}`` and ``/{env}/mcp`` for every hosted environment (and ``/mcp`` for the
    only one). Capacity and idle time are the store's:
    an MCP session is one store session, and it ends when the store lets go of that
    session (reaped idle past the TTL, its closed result expired, shut down), whatever its
    client keeps open or never sends.

    ``ENVHUB_MCP_LEAN=0`` in the environment turns the lean path of the handshake,
    ``tools/call`` and ``tools/list`` off (every request through the SDK's transport):
    the reference the tests hold the lean path to, and a way out should a client meet a
    difference.
    ``max_message_bytes`` bounds each message of OpenEnv's WebSocket
    (:mod:`envhub.mcp.openenv`), as the server's body limit bounds HTTP bodies, and its
    sessions count as idle after the store's TTL."""
    return McpEndpoints(
        {name: StoreEnvironment(store, name) for name in store.envs},
        session_gone=store.wait_forgotten,
        error_status=lambda exc: STATUS_BY_CODE.get(exc.code, 500),
        on_error=lambda code: metrics.errors.labels(code).inc(),
        lean=os.environ.get("ENVHUB_MCP_LEAN", "1") != "0",
        max_message_bytes=max_message_bytes,
        idle_s=store.session_ttl_s,
    )


class McpDoor:
    """Pure ASGI: the MCP paths (:meth:`~envhub.mcp.http.McpEndpoints.serves`) go to ``endpoints``,
    everything else passes on."""

    def __init__(self, app: ASGIApp, *, endpoints: McpEndpoints) -> None:
        self.app = app
        self.endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.endpoints.serves(scope["path"]):
            await self.endpoints(scope, receive, send)
        elif scope["type"] == "websocket" and self.endpoints.serves_socket(scope["path"]):
            await self.endpoints.socket(scope, receive, send)
        else:
            await self.app(scope, receive, send)


if TYPE_CHECKING:  # the protocols, checked statically against this implementation
    from envhub.protocol import EnvironmentClient, SessionHandle

    _client: type[EnvironmentClient] = StoreEnvironment
    _session: type[SessionHandle] = StoreSession

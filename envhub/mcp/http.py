"""Streamable HTTP serving of envhub sessions as MCP servers.

:class:`McpEndpoints` is a pure ASGI app serving ``/mcp/{env}``, and the same endpoint at
``/{env}/mcp``, for environments reached through any
:class:`~envhub.protocol.EnvironmentClient` (the server's hosted ones for ``envhub serve
--mcp``); when it serves one environment, that environment is also at ``/mcp``. The
paths ending in ``/mcp`` are for clients that only reach URLs whose path ends so (MCP
Inspector 0.15 rewrites any other to ``.../mcp``).

One MCP session is one envhub session: an ``initialize`` request without an
``Mcp-Session-Id`` opens an envhub session on the task its URL's ``task_id``
(or ``seed``) query parameter or the request's ``_meta`` (``envhub/task_id``,
``envhub/seed``) names, a seeded pick otherwise, and every answer of that MCP session
carries the envhub session id in the ``envhub-session-id`` header. Ending the MCP session
(``DELETE``) closes (scores) the envhub session before the ``DELETE`` is answered. An MCP
session also ends when its envhub session is gone (the server reaped it idle, or forgot
its closed result), so the envhub session's capacity and idle time bound the MCP session
whatever its client keeps open (a ``GET`` stream) or never sends (a ``DELETE``). The MCP
protocol itself is the official SDK's: each session's
:func:`~envhub.mcp.door.session_mcp_server` runs on its own
:class:`~mcp.server.streamable_http.StreamableHTTPServerTransport` once a request needs it.

The requests of every episode take a lean path when they are plainly well formed (see
:meth:`McpEndpoints._lean` and :mod:`envhub.mcp._lean`): the handshake (``initialize``,
``notifications/initialized``, ``DELETE``) and the hot requests (``tools/call``,
``tools/list``) are answered here from the session's :class:`~envhub.mcp.door.SessionDoor`,
with the SDK's own result models, version sieve, negotiation and error mapping, so the
bytes are the SDK's, without its per-session transport, message loop and memory streams
or its per-request task, parsing and dispatch. Everything else (GET streams, other
methods, any request the lean path does not fully understand) goes to the session's SDK
transport, started at the first such request with the handshake the lean path answered
replayed to it, so it serves the session from where the client brought it.

Sessions need the handshake era of the protocol: a sessionless (2026-07-28) request is
answered with ``UNSUPPORTED_PROTOCOL_VERSION`` naming the handshake versions, on which the
SDK's clients fall back to ``initialize``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qs

import anyio
import anyio.abc
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner, serve_loop
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCResponse,
    ListToolsResult,
    Result,
)
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from mcp_types.methods import serialize_server_result
from starlette.types import Message, Receive, Scope, Send

from envhub.errors import EnvhubError, InvalidRequest
from envhub.mcp._lean import (
    SEED_META,
    TASK_ID_META,
    lean_initialize,
    lean_request,
    text_result_wire,
)
from envhub.mcp.door import SessionDoor, door_instructions, door_server, mcp_error
from envhub.mcp.openenv import OpenEnvSessions, is_openenv_request
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.types import SessionStart

__all__ = [
    "ENVHUB_SESSION_HEADER",
    "SEED_META",
    "TASK_ID_META",
    "McpEndpoints",
]

log = logging.getLogger("envhub.mcp")

ENVHUB_SESSION_HEADER = "envhub-session-id"
_MAX_TASK_ID = 512

_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode()
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode()
_INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'


class _Refused(Exception):
    """An MCP request answered with a JSON-RPC error at an HTTP status."""

    def __init__(self, status: int, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.data = status, code, message, data


@dataclass(eq=False)
class _McpSession:
    """One MCP session: the envhub session it is and, once a request needs the SDK, the
    SDK's transport serving it (``None`` while the lean path has answered everything)."""

    mcp_session_id: str
    session: SessionHandle
    start: SessionStart
    env: str
    door: SessionDoor
    transport: StreamableHTTPServerTransport | None = None
    established: bool = False  # its initialize was answered with success
    version: str | None = None  # the protocol version its initialize negotiated
    # the lean handshake, replayed to the SDK's transport when one is started
    opening: tuple[Scope, bytes] | None = None
    initialized: bool = False  # notifications/initialized answered on the lean path
    ending: bool = False  # being closed or aborted (:meth:`McpEndpoints._end`)
    watch: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    loop: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    starting: anyio.Lock = field(default_factory=anyio.Lock)
    ended: anyio.Event = field(default_factory=anyio.Event)

    @property
    def header(self) -> tuple[bytes, bytes]:
        return ENVHUB_SESSION_HEADER.encode(), self.start.session_id.encode()

    @property
    def live(self) -> bool:
        """Not ended by a DELETE or by its envhub session being gone."""
        return not (self.ending or self.watch.cancel_called
                    or (self.transport is not None and self.transport.is_terminated))


class McpEndpoints:
    """``/mcp/{env}`` and ``/{env}/mcp`` for each of ``clients`` (by the name clients use),
    and ``/mcp`` for the only one when there is one; a pure ASGI app.

    Every path under ``/mcp/`` and the path ``/mcp`` are this app's (a name it does not
    serve is a JSON-RPC error naming the ones it does), but of ``/{env}/mcp`` only the
    hosted names: :meth:`serves` leaves every other path to the app beside it (an HTTP API
    has no path ending in ``/mcp``, so no hosted name can shadow one of its routes).

    Run it inside :meth:`running` (the serving app's lifespan): the sessions' message loops
    live in its task group, and leaving it ends them (aborting their envhub sessions).
    ``session_gone(session_id)`` returns once the server let go of that envhub session
    (reaped it idle, forgot its closed result); its MCP session then ends, so ``clients``
    decide capacity (``open`` refuses) and idle time for MCP sessions too.
    ``error_status`` gives the HTTP status of a core error at initialisation (the server's
    mapping); ``on_error`` counts each refused request by envhub error code. ``lean=False``
    sends every request through the SDK's transport (the lean path's reference).
    OpenEnv's clients are answered too (:mod:`envhub.mcp.openenv`): ``max_message_bytes``
    bounds their WebSocket messages, and their sessions count as idle after ``idle_s``.
    """

    def __init__(
        self,
        clients: Mapping[str, EnvironmentClient],
        *,
        session_gone: Callable[[str], Awaitable[None]],
        error_status: Callable[[EnvhubError], int] = lambda exc: 400,
        on_error: Callable[[str], None] = lambda code: None,
        lean: bool = True,
        max_message_bytes: int = 16 * 1024 * 1024,
        idle_s: float = 600.0,
    ) -> None:
        self.clients = dict(clients)
        self.lean = lean
        self.session_gone = session_gone
        self._suffixed = {f"/{name}/mcp": name for name in self.clients}
        self._sockets = {f"/{name}/ws": name for name in self.clients}
        if len(self.clients) == 1:
            self._sockets["/ws"] = next(iter(self.clients))
        self.openenv = OpenEnvSessions(self.clients, max_message_bytes=max_message_bytes,
                                       idle_s=idle_s)
        self.error_status = error_status
        self.on_error = on_error
        self._sessions: dict[str, _McpSession] = {}
        self._initialize_results: dict[tuple[str, str], dict[str, Any]] = {}
        self._tasks: anyio.abc.TaskGroup | None = None

    def serves(self, path: str) -> bool:
        """Whether ``path`` is an MCP endpoint of this app (a trailing ``/`` is allowed)."""
        path = path.rstrip("/")
        return path == "/mcp" or path.startswith("/mcp/") or path in self._suffixed

    def serves_socket(self, path: str) -> bool:
        """Whether ``path`` is the OpenEnv WebSocket of a hosted environment (``/ENV/ws``,
        and ``/ws`` when one is hosted): :mod:`envhub.mcp.openenv`."""
        return path.rstrip("/") in self._sockets

    async def socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An OpenEnv client's WebSocket (:meth:`serves_socket`)."""
        await self.openenv.websocket(self._sockets[scope["path"].rstrip("/")], scope,
                                     receive, send)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    # -- requests ----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id: Any = None
        try:
            try:
                env = self._env_of(scope["path"])
            except _Refused:
                if scope["method"] == "POST":  # answered under the id it was asked with
                    request_id = _request_id(await _read_body(receive))
                raise
            headers = dict(scope["headers"])
            version = headers.get(_VERSION_HEADER)
            if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
                if scope["method"] == "POST":
                    request_id = _request_id(await _read_body(receive))
                raise _Refused(
                    400, UNSUPPORTED_PROTOCOL_VERSION,
                    "an envhub MCP endpoint is one episode per MCP session: use the "
                    "initialize handshake (protocol versions "
                    f"{', '.join(HANDSHAKE_PROTOCOL_VERSIONS)})",
                    {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS),
                     "requested": version.decode("latin-1")},
                )
            mcp_session_id = headers.get(_SESSION_HEADER)
            if mcp_session_id is not None:
                await self._continue(env, mcp_session_id.decode("latin-1"), scope, receive, send,
                                     headers)
                return
            if scope["method"] != "POST":
                raise _Refused(400, INVALID_REQUEST, "no Mcp-Session-Id header: an MCP session "
                                                     "starts with a POSTed initialize request")
            body = await _read_body(receive)
            request_id = _request_id(body)
            message = _openenv_message(body)
            if message is not None:  # OpenEnv's client: no initialize (envhub.mcp.openenv)
                await _json(send, 200, await self.openenv.rpc(env, message))
                return
            await self._initialize(env, scope, body, send, headers)
        except _Refused as refusal:
            self.on_error(_envhub_code(refusal))
            await _jsonrpc_error(send, refusal, request_id)

    def _env_of(self, path: str) -> str:
        path = path.rstrip("/")
        hosted = ", ".join(sorted(self.clients))
        if path in self._suffixed:
            return self._suffixed[path]
        if path == "/mcp":
            if len(self.clients) == 1:
                return next(iter(self.clients))
            raise _Refused(404, INVALID_PARAMS,
                           f"{len(self.clients)} environments are hosted here: name one, "
                           f"/mcp/ENV or /ENV/mcp (hosted: {hosted})",
                           {"code": "unknown_environment"})
        env = path.removeprefix("/mcp/")
        if env not in self.clients:
            raise _Refused(404, INVALID_PARAMS,
                           f"environment {env!r} is not hosted here (hosted: {hosted})",
                           {"code": "unknown_environment"})
        return env

    async def _continue(
        self, env: str, mcp_session_id: str, scope: Scope, receive: Receive, send: Send,
        headers: dict[bytes, bytes],
    ) -> None:
        """A request of an open MCP session; a DELETE is answered once the envhub session
        has been closed, so its 200 means the episode is scored. A POST's body is read
        here, so that one over the size limit is refused as such (413) rather than as a
        failure of the SDK's transport."""
        entry = self._sessions.get(mcp_session_id)
        if entry is None or entry.env != env:
            raise _Refused(404, INVALID_REQUEST, "Session not found: no open MCP session "
                                                 f"{mcp_session_id[:64]!r} for {env!r}",
                           {"code": "session_not_found"})
        if scope["method"] == "POST":
            body = await _read_body(receive)
            if not (self.lean and await self._lean(entry, headers, body, send)):
                transport = await self._sdk(entry)
                await _answer(transport, scope, body, _with_header(send, entry.header))
            return
        if scope["method"] == "DELETE" and entry.transport is None and entry.live:
            # as the SDK's transport answers the DELETE of its session (the session id is
            # the one it was opened with, nothing else is read), once the episode is scored
            entry.watch.cancel()
            await entry.ended.wait()
            await _answer_lean(send, entry, 200, b"")
            return
        transport = await self._sdk(entry)
        if scope["method"] != "DELETE":
            await transport.handle_request(scope, receive, _with_header(send, entry.header))
            return
        held: list[Message] = []

        async def hold(message: Message) -> None:
            held.append(message)

        await transport.handle_request(scope, receive, _with_header(hold, entry.header))
        if transport.is_terminated:
            await entry.ended.wait()
        for message in held:
            await send(message)

    async def _initialize(self, env: str, scope: Scope, body: bytes, send: Send,
                          headers: dict[bytes, bytes]) -> None:
        """Open the envhub session and answer ``initialize``: on the lean path when the
        request is plainly well formed (:func:`~envhub.mcp._lean.lean_initialize`), as
        the SDK's server answers it, with no SDK transport until a request needs one (:meth:`_sdk`);
        otherwise through a new SDK transport, which words any refusal."""
        message = _parse(body)
        if message.get("method") != "initialize":
            raise _Refused(400, INVALID_REQUEST, "no Mcp-Session-Id header: the first request "
                                                 "of an MCP session must be initialize")
        task_id, seed = _task_choice(scope, message)
        lean = lean_initialize(headers, message) if self.lean else None
        try:
            session = await self.clients[env].open(task_id, seed=seed)
        except EnvhubError as exc:
            error = mcp_error(exc).error
            raise _Refused(self.error_status(exc), error.code, error.message,
                           error.data) from exc
        try:
            start = await session.reset()
            entry = _McpSession(uuid.uuid4().hex, session, start, env,
                                SessionDoor(session, start, env_name=env))
            if self._tasks is None:
                raise RuntimeError("McpEndpoints is not running (enter running() first)")
            if lean is None:
                entry.transport = StreamableHTTPServerTransport(
                    entry.mcp_session_id, is_json_response_enabled=True)
                await self._tasks.start(self._serve, entry, entry.transport)
            await self._tasks.start(self._watch, entry)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await session.abort()
            raise
        # known before the answer leaves: the client's next request may come at once
        self._sessions[entry.mcp_session_id] = entry
        if lean is not None:
            request_id, entry.version = lean
            entry.established, entry.opening = True, (scope, body)
            answer = JSONRPCResponse(jsonrpc="2.0", id=request_id,
                                     result=self._initialize_result(entry, message["params"]))
            await _answer_lean(send, entry, 200,
                               answer.model_dump_json(by_alias=True, exclude_unset=True).encode())
            return
        assert entry.transport is not None
        answer_body: list[bytes] = []

        async def keep(message: Message) -> None:
            if message["type"] == "http.response.body":
                answer_body.append(message.get("body", b""))
            await send(message)

        try:
            status = await _answer(entry.transport, scope, body, _with_header(keep, entry.header))
            entry.established = status is not None and status < 400
            if entry.established:
                entry.version = _negotiated(b"".join(answer_body))
        finally:
            if not entry.established:  # the loop ends and the envhub session is aborted
                self._sessions.pop(entry.mcp_session_id, None)
                with anyio.CancelScope(shield=True):
                    await entry.transport.terminate()

    def _initialize_result(self, entry: _McpSession, params: dict[str, Any]) -> dict[str, Any]:
        """The wire result the SDK's server answers ``initialize`` with: made by the SDK's own
        runner once per environment and negotiated version (never per requested one: a
        client names any string), then only the instructions, the one part that differs
        between sessions (:func:`door_instructions`), are set."""
        assert entry.version is not None
        key = (entry.env, entry.version)
        result = self._initialize_results.get(key)
        if result is None:
            runner = ServerRunner(door_server(entry.door), cast(Connection, None), {})
            result = runner._serialize("initialize", LATEST_HANDSHAKE_VERSION,
                                       runner._handle_initialize(params))
            self._initialize_results[key] = result
        return {**result, "instructions": door_instructions(entry.door)}

    async def _sdk(self, entry: _McpSession) -> StreamableHTTPServerTransport:
        """The session's SDK transport, started at the first request the lean path leaves
        to the SDK: the handshake the lean path answered is replayed to it first (its
        answers dropped), so the SDK's session is where the client brought it."""
        async with entry.starting:
            if entry.transport is not None:
                return entry.transport
            if not entry.live or entry.opening is None or self._tasks is None:
                raise _Refused(404, INVALID_REQUEST, "Session not found: the MCP session "
                                                     f"{entry.mcp_session_id!r} has ended",
                               {"code": "session_not_found"})
            transport = entry.transport = StreamableHTTPServerTransport(
                entry.mcp_session_id, is_json_response_enabled=True)
            await self._tasks.start(self._serve, entry, transport)
            scope, body = entry.opening
            await _answer(transport, scope, body, _drop)
            if entry.initialized:
                session = (_SESSION_HEADER, entry.mcp_session_id.encode())
                await _answer(transport, {**scope, "headers": [*scope["headers"], session]},
                              _INITIALIZED, _drop)
            return transport

    async def _serve(
        self, entry: _McpSession, transport: StreamableHTTPServerTransport, *,
        task_status: anyio.abc.TaskStatus[None],
    ) -> None:
        """The SDK's message loop of the session, until a DELETE or the envhub session is
        gone; then the envhub session is closed (scored, if it is still open); after a
        failed initialize, a crash or at shutdown, aborted."""
        finished = False
        try:
            async with transport.connect() as (read_stream, write_stream):
                task_status.started()
                with entry.loop:
                    await serve_loop(door_server(entry.door), read_stream, write_stream,
                                     lifespan_state={}, session_id=entry.mcp_session_id)
            finished = True
        except Exception:
            log.exception("MCP session %s of %s crashed", entry.mcp_session_id, entry.env)
        finally:
            self._sessions.pop(entry.mcp_session_id, None)
            entry.watch.cancel()
            with anyio.CancelScope(shield=True):
                await self._end(entry, score=finished and entry.established)

    async def _watch(self, entry: _McpSession, *,
                     task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                     ) -> None:
        """The session's life beside its requests: it ends when its envhub session is gone
        or at a DELETE (``entry.watch`` cancelled); later requests then find no session
        (404), those in flight end as at a DELETE. A session the SDK serves is closed by
        its loop (:meth:`_serve`), which this stops; one the lean path alone served is
        closed (scored) here, or aborted at shutdown."""
        shutdown = True
        try:
            with entry.watch:
                task_status.started()
                await self.session_gone(entry.start.session_id)
            shutdown = False
        finally:
            self._sessions.pop(entry.mcp_session_id, None)
            with anyio.CancelScope(shield=True):
                if entry.transport is None:
                    await self._end(entry, score=not shutdown)
                else:
                    if not entry.transport.is_terminated:
                        await entry.transport.terminate()
                    entry.loop.cancel()

    async def _lean(self, entry: _McpSession, headers: dict[bytes, bytes], body: bytes,
                    send: Send) -> bool:
        """Answer a ``tools/call``, a ``tools/list`` or (before the SDK's transport is
        started) ``notifications/initialized`` here, as the session's SDK server would,
        when the request is plainly well formed: headers the SDK's transport accepts
        without a word (JSON content type, an Accept naming JSON), one JSON-RPC message
        object with exactly the fields and types the SDK validates without a word, on an
        established, live session whose protocol version is known. ``False`` (nothing read
        beyond ``body``, nothing sent) leaves every other request to the SDK, which words
        the refusals: this path never guesses.

        The answer is made as the SDK makes it (its result models dumped, sieved for the
        session's protocol version, put in its JSON-RPC envelope; a handler's error mapped
        by its dispatcher's rule), so only the cost differs: no request task, memory
        streams, Starlette request, dispatch context or tracing span per call. A tool
        result of text alone, what every call answers, skips the sieve (a pydantic
        validation of the protocol's whole result union, half of the step's cost here) for
        the form it gives in every handshake version
        (:func:`~envhub.mcp._lean.text_result_wire`)."""
        version = entry.version
        if version is None or not entry.established or not entry.live:
            return False
        request = lean_request(headers, body)
        if request is None:
            return False
        request_id, method, params = request
        if request_id is None:  # notifications/initialized: the SDK's 202, its state kept
            if entry.transport is not None:
                return False
            entry.initialized = True
            await _answer_lean(send, entry, 202, b"")
            return True
        message: JSONRPCResponse | JSONRPCError
        try:
            result: Result
            if method == "tools/list":
                result = ListToolsResult(tools=entry.door.tools)
            else:
                result = await entry.door.call(params["name"], params.get("arguments", {}))
            wire = text_result_wire(result) if isinstance(result, CallToolResult) else None
            if wire is None:
                dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
                wire = serialize_server_result(method, version, dumped)
            message = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=wire)
        except Exception as exc:  # as the SDK's dispatcher answers a handler's exception
            error = handler_exception_to_error_data(exc)
            if error is None:
                log.exception("handler for %r raised", method)
                error = ErrorData(code=0, message=str(exc))
            message = JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        await _answer_lean(send, entry, 200,
                           message.model_dump_json(by_alias=True, exclude_unset=True).encode())
        return True

    async def _end(self, entry: _McpSession, *, score: bool) -> None:
        if entry.ending:
            return
        entry.ending = True
        try:
            if entry.transport is not None and not entry.transport.is_terminated:
                await entry.transport.terminate()
            if score:
                await entry.session.close()
            else:
                await entry.session.abort()
        except EnvhubError as exc:  # already closed elsewhere, or the environment failed
            log.info("closing envhub session %s after its MCP session: %s",
                     entry.start.session_id, exc)
        finally:
            entry.ended.set()


# -- helpers ---------------------------------------------------------------------------------


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Refused(400, INVALID_REQUEST, "the client disconnected mid-request")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _parse(body: bytes) -> dict[str, Any]:
    """The request, read by the parser the SDK's transport reads it with (bounded nesting,
    no lone surrogates), so the door accepts exactly what the session will."""
    try:
        message = pydantic_core.from_json(body)
    except ValueError as exc:
        raise _Refused(400, PARSE_ERROR, f"the body is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise _Refused(400, INVALID_REQUEST, "an initialize request is one JSON-RPC object")
    return message


def _request_id(body: bytes) -> Any:
    try:
        message = pydantic_core.from_json(body)
    except ValueError:
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if isinstance(request_id, (str, int)) else None


def _openenv_message(body: bytes) -> dict[str, Any] | None:
    """The request if it is OpenEnv's (:func:`~envhub.mcp.openenv.is_openenv_request`)."""
    try:
        message = pydantic_core.from_json(body)
    except ValueError:
        return None
    return message if is_openenv_request(message) else None


def _negotiated(answer: bytes) -> str | None:
    """The protocol version a successful initialize answer names."""
    try:
        version = pydantic_core.from_json(answer)["result"]["protocolVersion"]
    except (ValueError, KeyError, TypeError):
        return None
    return version if version in HANDSHAKE_PROTOCOL_VERSIONS else None


def _task_choice(scope: Scope, message: dict[str, Any]) -> tuple[str | None, int | None]:
    """The task the client chose: query parameters first, then the request's ``_meta``."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    task_id: Any = query["task_id"][-1] if "task_id" in query else meta.get(TASK_ID_META)
    seed: Any = query["seed"][-1] if "seed" in query else meta.get(SEED_META)
    if task_id is not None and (not isinstance(task_id, str) or not 0 < len(task_id)
                                <= _MAX_TASK_ID):
        raise _Refused(400, INVALID_PARAMS,
                       f"task_id must be a string of 1-{_MAX_TASK_ID} characters",
                       {"code": InvalidRequest.code})
    if seed is not None:
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            raise _Refused(400, INVALID_PARAMS, f"seed must be an integer, got {seed!r}",
                           {"code": InvalidRequest.code}) from None
    return task_id, seed


async def _answer(transport: StreamableHTTPServerTransport, scope: Scope, body: bytes,
                  send: Send) -> int | None:
    """Let ``transport`` answer a request whose body was already read; its HTTP status."""
    delivered = False
    status: int | None = None

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def watch(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await transport.handle_request(scope, replay, watch)
    return status


async def _answer_lean(send: Send, entry: _McpSession, status: int, payload: bytes) -> None:
    """An answer of the lean path, with the headers, in the order, of the SDK transport's
    JSON answers (and the envhub session's header after them, as :func:`_with_header`)."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"),
        (_SESSION_HEADER, entry.mcp_session_id.encode()),
        (b"content-length", str(len(payload)).encode()),
        entry.header,
    ]})
    await send({"type": "http.response.body", "body": payload})


async def _drop(message: Message) -> None:
    """A ``send`` for answers nobody reads (the handshake replayed to the SDK)."""


def _with_header(send: Send, header: tuple[bytes, bytes]) -> Send:
    async def send_with_header(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), header]}
        await send(message)

    return send_with_header


def _envhub_code(refusal: _Refused) -> str:
    if isinstance(refusal.data, dict) and isinstance(refusal.data.get("code"), str):
        return str(refusal.data["code"])
    return "invalid_request"


async def _jsonrpc_error(send: Send, refusal: _Refused, request_id: Any) -> None:
    error: dict[str, Any] = {"code": refusal.code, "message": refusal.message}
    if refusal.data is not None:
        error["data"] = refusal.data
    await _json(send, refusal.status, {"jsonrpc": "2.0", "id": request_id, "error": error})


async def _json(send: Send, status: int, answer: dict[str, Any]) -> None:
    body = json.dumps(answer).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

"""OpenEnv's session protocol on envhub's MCP door, so OpenEnv's own clients
(``MCPToolClient``, ``GenericEnvClient``) drive envhub environments unchanged.

OpenEnv's ``MCPToolClient`` (openenv 0.10) is not a Streamable HTTP client: it POSTs
JSON-RPC to ``{base}/mcp`` without ``initialize`` (``openenv/session/create``, then
``tools/list`` and ``tools/call`` naming the session in ``params.session_id``,
``openenv/session/close`` at the end), and drives the same session's ``reset`` and
``step`` over a WebSocket at ``{base}/ws?session_id=...`` in OpenEnv's frames
(``{"type": "reset" | "step" | "state" | "close", "data": ...}``). With ``base`` an
environment's door (``http://host:port/ENV``, or the server itself when it hosts one
environment), :class:`McpEndpoints <envhub.mcp.http.McpEndpoints>` hands those requests
here; standard MCP requests never come here (they carry an ``Mcp-Session-Id`` or are an
``initialize``).

The mapping: an OpenEnv session is a sequence of envhub episodes, one at a time.
``reset(task_id=..., seed=..., episode_id=...)`` scores the session's open episode, if
any, and opens a new one on that task (``seed``: a seeded pick; ``episode_id``: the envhub
session id; nothing: the server's seeded pick); the reset observation is the task's
messages. A tool call (``step`` with a ``call_tool`` action, or ``tools/call``) is one
envhub step with one call, mapped by :class:`~envhub.mcp.door.SessionDoor` as on every
MCP door: the step's ``reward`` is the episode's reward on the step that ended it and the
turn's reward (or none) before, its ``done`` the episode's end, its ``metadata`` the
door's ``envhub/*`` keys. A call or listing before any ``reset`` opens an episode on the
server's seeded pick. An episode that ends is closed (scored) at once; later calls are
error results until the next ``reset``. Closing the session (``openenv/session/close``,
or the end of a WebSocket that created its own session) scores its open episode; a
session its client never closes holds its episode until the server reaps it idle. At
:data:`MAX_SESSIONS`, a new session replaces the least recently used one without a socket
only if that one has been unused for longer than the server's idle time (``idle_s``: its
episode, if any, was reaped already); otherwise it is refused (``CAPACITY_REACHED``). So
a client that never closes its sessions cannot fill the table for good, and no client can
end another's episode by opening sessions.

Every episode is a session of the hosted environment's client (the store's, under
``envhub serve``): counted against its capacity, reaped when idle. Unknown methods,
unknown frame types, malformed parameters and unknown sessions are typed errors
(JSON-RPC errors over HTTP, ``{"type": "error"}`` frames over the socket), never a crash.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
import pydantic_core
from mcp.shared.exceptions import MCPError
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from envhub.errors import EnvhubError
from envhub.mcp._lean import is_request_id
from envhub.mcp.door import META_DONE, META_REWARD, META_TURN_REWARD, SessionDoor, mcp_error
from envhub.protocol import EnvironmentClient, SessionHandle

__all__ = ["MAX_SESSIONS", "OpenEnvSessions", "is_openenv_request"]

log = logging.getLogger("envhub.mcp")

MAX_SESSIONS = 10_000  #: OpenEnv sessions kept per door (the least recently used go first)
_RESET_KEYS = frozenset({"task_id", "seed", "episode_id"})
_SESSION_METHODS = ("openenv/session/create", "openenv/session/close")


def is_openenv_request(message: Any) -> bool:
    """Whether a POSTed JSON-RPC message without ``Mcp-Session-Id`` is OpenEnv's: an
    ``openenv/*`` method, or ``tools/*`` naming an OpenEnv session in its params (a
    standard client's first request is ``initialize``, never these)."""
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return False
    method, params = message["method"], message.get("params")
    return method.startswith("openenv/") or (
        method.startswith("tools/") and isinstance(params, dict) and "session_id" in params)


@dataclass(eq=False)
class _Episode:
    session: SessionHandle
    door: SessionDoor
    steps: int = 0
    ended: bool = False


@dataclass(eq=False)
class _Session:
    """One OpenEnv session: its open episode, if any, and whether a socket drives it."""

    env: str
    session_id: str
    episode: _Episode | None = None
    attached: bool = False
    used: float = field(default_factory=time.monotonic)
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class _Refusal(Exception):
    """A request refused: ``code`` the JSON-RPC error code, ``frame`` the socket's."""

    def __init__(self, code: int, frame: str, message: str, data: dict[str, Any] | None = None
                 ) -> None:
        super().__init__(message)
        self.code, self.frame, self.message, self.data = code, frame, message, data or {}

    @classmethod
    def of(cls, exc: EnvhubError) -> _Refusal:
        error = mcp_error(exc).error
        frame = ("CAPACITY_REACHED" if exc.code == "capacity" else
                 "VALIDATION_ERROR" if error.code == types.INVALID_PARAMS else "EXECUTION_ERROR")
        return cls(error.code, frame, error.message, {"code": exc.code})


class OpenEnvSessions:
    """The OpenEnv sessions of one MCP door over ``clients`` (module docstring)."""

    def __init__(self, clients: Mapping[str, EnvironmentClient], *,
                 max_message_bytes: int = 16 * 1024 * 1024, idle_s: float = 600.0) -> None:
        self.clients = clients
        self.max_message_bytes = max_message_bytes
        self.idle_s = idle_s
        self._sessions: dict[str, _Session] = {}

    # -- HTTP: JSON-RPC ----------------------------------------------------------------------

    async def rpc(self, env: str, message: dict[str, Any]) -> dict[str, Any]:
        """The JSON-RPC answer to one OpenEnv request on ``env``'s door."""
        request_id = message.get("id")
        if not is_request_id(request_id):
            request_id = None
        try:
            if message.get("jsonrpc") != "2.0":
                raise _Refusal(types.INVALID_REQUEST, "", "not a JSON-RPC 2.0 request")
            params = message.get("params", {})
            if not isinstance(params, dict):
                raise _Refusal(types.INVALID_PARAMS, "", "params must be an object")
            result = await self._rpc(env, message["method"], params)
            return {"jsonrpc": "2.0", "id": request_id, "result": result}
        except _Refusal as refusal:
            error: dict[str, Any] = {"code": refusal.code, "message": refusal.message}
            if refusal.data:
                error["data"] = refusal.data
            return {"jsonrpc": "2.0", "id": request_id, "error": error}

    async def _rpc(self, env: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "openenv/session/create":
            return {"session_id": (await self._create(env)).session_id}
        if method not in (*_SESSION_METHODS, "tools/list", "tools/call"):
            raise _Refusal(types.METHOD_NOT_FOUND, "", f"Method not found: {method} (OpenEnv "
                           "sessions take openenv/session/create, openenv/session/close, "
                           "tools/list and tools/call)")
        entry = self._find(env, params.get("session_id"))
        if method == "openenv/session/close":
            await self._close(entry)
            return {"session_id": entry.session_id, "closed": True}
        if method == "tools/list":
            episode = await self._episode(entry)
            return {"tools": [t.model_dump(by_alias=True, mode="json", exclude_none=True)
                              for t in episode.door.tools]}
        name, arguments = params.get("name"), params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise _Refusal(types.INVALID_PARAMS, "", "tools/call takes a string name and an "
                                                     "object of arguments")
        result, _ = await self._call(entry, name, arguments)
        return result

    # -- the socket: OpenEnv's frames --------------------------------------------------------

    async def websocket(self, env: str, scope: Scope, receive: Receive, send: Send) -> None:
        """``{base}/ws``: a session's ``reset``/``step``/``state``/``close`` frames, on the
        session ``?session_id=`` names (made by ``openenv/session/create``) or on one of
        its own, closed with the socket."""
        socket = WebSocket(scope, receive, send)
        await socket.accept()
        owned = False
        entry: _Session | None = None
        try:
            requested = socket.query_params.get("session_id")
            try:
                if requested is None:
                    entry, owned = await self._create(env), True
                else:
                    entry = self._find(env, requested)
                    if entry.attached:
                        raise _Refusal(types.INVALID_REQUEST, "SESSION_ERROR",
                                       f"session {requested[:64]!r} already has a WebSocket")
                entry.attached = True
            except _Refusal as refusal:
                await socket.send_text(_frame("error", {"message": refusal.message,
                                                        "code": refusal.frame or "SESSION_ERROR"}))
                return
            while True:
                message = await socket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                raw = message.get("text")
                if raw is None:  # a binary frame: read as UTF-8 JSON, as text would be
                    raw = (message.get("bytes") or b"").decode("utf-8", "replace")
                answer = await self._frame(entry, raw)
                if answer is None:
                    return
                await socket.send_text(answer)
        except WebSocketDisconnect:
            pass
        finally:
            if entry is not None:
                entry.attached = False
                if owned:
                    with anyio.CancelScope(shield=True):
                        await self._close(entry)
            with anyio.CancelScope(shield=True):
                try:
                    await socket.close()
                except RuntimeError:
                    pass  # already closed by the client

    async def _frame(self, entry: _Session, raw: str) -> str | None:
        """The answer to one frame; ``None`` for ``close``."""
        if len(raw) > self.max_message_bytes:
            return _error("VALIDATION_ERROR", f"message larger than {self.max_message_bytes} "
                                              "bytes")
        try:
            message = pydantic_core.from_json(raw)
        except ValueError as exc:
            return _error("INVALID_JSON", f"Invalid JSON: {exc}")
        kind = message.get("type") if isinstance(message, dict) else None
        data = message.get("data", {}) if isinstance(message, dict) else None
        if kind == "close":
            return None
        try:
            if kind not in ("reset", "step", "state"):
                raise _Refusal(types.INVALID_REQUEST, "UNKNOWN_TYPE",
                               f"Unknown message type: {str(kind)[:64]}")
            if kind == "state":
                episode = entry.episode
                return _frame("state", {
                    "episode_id": episode.door.start.session_id if episode else None,
                    "task_id": episode.door.start.task_id if episode else None,
                    "step_count": episode.steps if episode else 0,
                })
            if not isinstance(data, dict):
                raise _Refusal(types.INVALID_PARAMS, "VALIDATION_ERROR",
                               f"a {kind} frame's data must be an object")
            if kind == "reset":
                return _frame("observation", await self._reset(entry, data))
            return _frame("observation", await self._step(entry, data))
        except _Refusal as refusal:
            return _error(refusal.frame or "VALIDATION_ERROR", refusal.message, refusal.data)

    async def _reset(self, entry: _Session, data: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(data.keys() - _RESET_KEYS)
        if unknown:
            raise _Refusal(types.INVALID_PARAMS, "VALIDATION_ERROR",
                           f"reset takes task_id, seed and episode_id, not {', '.join(unknown)}")
        task_id, seed, episode_id = data.get("task_id"), data.get("seed"), data.get("episode_id")
        if (task_id is not None and not isinstance(task_id, str)) or (
                seed is not None and (isinstance(seed, bool) or not isinstance(seed, int))) or (
                episode_id is not None and not isinstance(episode_id, str)):
            raise _Refusal(types.INVALID_PARAMS, "VALIDATION_ERROR",
                           "reset: task_id and episode_id are strings, seed an integer")
        async with entry.lock:
            await self._end_episode(entry)
            episode = await self._open(entry, task_id, seed, episode_id)
        start = episode.door.start
        return {"observation": {"task_id": start.task_id, "episode_id": start.session_id,
                                "messages": start.messages},
                "reward": None, "done": False, "metadata": {}}

    async def _step(self, entry: _Session, action: dict[str, Any]) -> dict[str, Any]:
        kind = action.get("type")
        if kind == "list_tools":
            episode = await self._episode(entry)
            return {"observation": {"tools": [
                {"name": t.name, "description": t.description or "", "input_schema":
                 t.input_schema} for t in episode.door.tools]},
                "reward": None, "done": False, "metadata": {}}
        name, arguments = action.get("tool_name"), action.get("arguments", {})
        if kind != "call_tool" or not isinstance(name, str) or not isinstance(arguments, dict):
            raise _Refusal(types.INVALID_PARAMS, "VALIDATION_ERROR",
                           "envhub environments take MCP actions: {\"type\": \"call_tool\", "
                           "\"tool_name\": ..., \"arguments\": {...}} or {\"type\": "
                           "\"list_tools\"}")
        result, meta = await self._call(entry, name, arguments)
        error = ({"error_type": "execution_error", "message": result["data"]}
                 if result.get("isError") else None)
        done = bool(meta.get(META_DONE))
        reward = meta.get(META_REWARD) if done else meta.get(META_TURN_REWARD)
        return {"observation": {"tool_name": name, "result": result, "error": error},
                "reward": reward, "done": done, "metadata": meta}

    # -- sessions and episodes ---------------------------------------------------------------

    async def _create(self, env: str) -> _Session:
        """A new session; at :data:`MAX_SESSIONS`, the least recently used one without a
        socket is closed first if it has been unused for ``idle_s`` (module docstring),
        else the new one is refused."""
        if len(self._sessions) >= MAX_SESSIONS:
            oldest = next((e for e in self._sessions.values() if not e.attached), None)
            if oldest is None or time.monotonic() - oldest.used <= self.idle_s:
                raise _Refusal(types.INTERNAL_ERROR, "CAPACITY_REACHED",
                               f"{MAX_SESSIONS} OpenEnv sessions are in use here (each on a "
                               f"socket or used within {self.idle_s:g} s)",
                               {"code": "capacity", "max_sessions": MAX_SESSIONS})
            await self._close(oldest)
        entry = _Session(env, uuid.uuid4().hex)
        self._sessions[entry.session_id] = entry
        return entry

    def _find(self, env: str, session_id: Any) -> _Session:
        if not isinstance(session_id, str):
            raise _Refusal(types.INVALID_PARAMS, "SESSION_ERROR",
                           "params.session_id (a string from openenv/session/create) is required")
        entry = self._sessions.get(session_id)
        if entry is None or entry.env != env:
            raise _Refusal(types.INVALID_PARAMS, "SESSION_ERROR",
                           f"Unknown session_id: {session_id[:64]!r} for {env!r}",
                           {"code": "session_not_found"})
        self._sessions[session_id] = self._sessions.pop(session_id)  # most recently used
        entry.used = time.monotonic()
        return entry

    async def _episode(self, entry: _Session) -> _Episode:
        """The session's episode, opened on the server's pick if none was reset."""
        async with entry.lock:
            if entry.episode is None:
                return await self._open(entry, None, None, None)
            return entry.episode

    async def _open(self, entry: _Session, task_id: str | None, seed: int | None,
                    episode_id: str | None) -> _Episode:
        try:
            session = await self.clients[entry.env].open(task_id, seed=seed,
                                                         session_id=episode_id)
            try:
                start = await session.reset()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await session.abort()
                raise
        except EnvhubError as exc:
            raise _Refusal.of(exc) from exc
        entry.episode = _Episode(session, SessionDoor(session, start, env_name=entry.env))
        return entry.episode

    async def _call(self, entry: _Session, name: str, arguments: dict[str, Any]
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """One tool call: the MCP result's wire form (with ``data``, its text, where
        OpenEnv's client reads a tool's value) and its ``_meta``."""
        episode = await self._episode(entry)
        try:
            result = await episode.door.call(name, arguments)
        except MCPError as exc:
            error = exc.error
            raise _Refusal(error.code, "EXECUTION_ERROR", error.message,
                           error.data if isinstance(error.data, dict) else None) from exc
        episode.steps += 1
        meta = dict(result.meta or {})
        if meta.get(META_DONE) and not episode.ended:
            episode.ended = True
            await self._finish(episode)
        wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        wire["data"] = "".join(p.text for p in result.content
                               if isinstance(p, types.TextContent))
        return wire, meta

    async def _end_episode(self, entry: _Session) -> None:
        episode, entry.episode = entry.episode, None
        if episode is not None and not episode.ended:
            episode.ended = True
            await self._finish(episode)

    async def _close(self, entry: _Session) -> None:
        self._sessions.pop(entry.session_id, None)
        async with entry.lock:
            await self._end_episode(entry)

    @staticmethod
    async def _finish(episode: _Episode) -> None:
        """Close (score) an episode; one already gone (reaped, closed) needs nothing."""
        try:
            await episode.session.close()
        except EnvhubError as exc:  # SessionClosed among them
            log.info("closing envhub session %s of an OpenEnv session: %s",
                     episode.door.start.session_id, exc)


def _frame(kind: str, data: dict[str, Any]) -> str:
    return json.dumps({"type": kind, "data": data}, ensure_ascii=False, default=str)


def _error(code: str, message: str, data: dict[str, Any] | None = None) -> str:
    """An error frame: OpenEnv's ``code``; envhub's error code, if any, as ``envhub_code``."""
    extra = {("envhub_code" if k == "code" else k): v for k, v in (data or {}).items()}
    return _frame("error", {"message": message, "code": code, **extra})

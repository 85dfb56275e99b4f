"""OpenEnv's wire protocol, as OpenEnv 0.10's server speaks it, with its failures sorted
into the model's and the infrastructure's.

A session is one WebSocket to ``/ws``: the server makes one environment instance for it
and answers, in order, one frame per message: ``{"type": "reset", "data": kwargs}`` and
``{"type": "step", "data": action}`` with ``{"type": "observation", "data":
{"observation", "reward", "done", "metadata"}}``, anything it refuses with ``{"type":
"error", "data": {"message", "code"}}``; ``{"type": "close"}`` ends it. Frames carry no
request id, so a reply that arrives after its caller gave up (the session's tool timeout
cancelled it) is read and dropped before the next reply, which is then the next
request's. Two stateless HTTP routes tell what a session will offer: ``GET /schema``
(the action's JSON schema) and ``POST /mcp`` (JSON-RPC ``tools/list`` of an MCP
environment).

Failure contract of :meth:`OpenEnvSession.step`:

- the server refused the action (``VALIDATION_ERROR``: it does not fit the action model)
  or the environment raised while stepping (``EXECUTION_ERROR``):
  :class:`StepRefused`, an error observation the model reads;
- the socket dropped, the server is gone, refused the session (``CAPACITY_REACHED``,
  ``FACTORY_ERROR``, ``SESSION_ERROR``) or answered what the protocol does not allow:
  :class:`~envhub.errors.SandboxError`, which the session re-raises and the rollout masks
  (and retries on a fresh session).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from envhub.errors import SandboxError, ToolError

__all__ = [
    "OpenEnvSession",
    "StepOutcome",
    "StepRefused",
    "fetch_action_schema",
    "list_mcp_tools",
    "ws_url",
]

#: error codes of frames that refuse the model's action (all others are infrastructure)
_MODEL_CODES = frozenset({"VALIDATION_ERROR", "EXECUTION_ERROR"})
_MAX_FRAME = 64 * 1024 * 1024  # OpenEnv's client allows 100 MB; an observation is text
_CLOSE_WAIT_S = 5.0


class StepRefused(ToolError):
    """The OpenEnv server refused the action or the environment raised on it."""


@dataclass(frozen=True)
class StepOutcome:
    """One observation frame: the observation's own fields (without ``done``,
    ``reward``, ``metadata``), its reward (``None``: none given), whether the episode
    is done, and its metadata."""

    observation: dict[str, Any]
    reward: float | None
    done: bool
    metadata: dict[str, Any] = field(default_factory=dict)


def ws_url(base_url: str) -> str:
    """The session endpoint of a server at ``base_url`` (``http(s)://host:port``)."""
    scheme, _, rest = base_url.rstrip("/").partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws"


def _reward(value: Any) -> float | None:
    if value is None:
        return None
    if not isinstance(value, bool | int | float) or not math.isfinite(float(value)):
        raise SandboxError(f"the OpenEnv server sent the reward {str(value)[:80]!r}, "
                           "not a finite number or null")
    return float(value)


def _outcome(frame: dict[str, Any]) -> StepOutcome:
    data = frame.get("data")
    if frame.get("type") != "observation" or not isinstance(data, dict):
        raise SandboxError(f"the OpenEnv server answered a {str(frame.get('type'))[:40]!r} "
                           "frame where an observation belongs")
    observation = data.get("observation")
    if not isinstance(observation, dict):
        raise SandboxError("the OpenEnv server sent an observation that is not an object")
    metadata = data.get("metadata") or observation.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise SandboxError("the OpenEnv server sent metadata that is not an object")
    fields = {k: v for k, v in observation.items() if k not in ("done", "reward", "metadata")}
    return StepOutcome(fields, _reward(data.get("reward")), bool(data.get("done")), metadata)


def _parse(raw: str | bytes) -> StepOutcome:
    """The outcome of one reply frame (see the module's failure contract)."""
    try:
        frame = json.loads(raw)
    except ValueError:
        raise SandboxError("the OpenEnv server sent a frame that is not JSON") from None
    if not isinstance(frame, dict):
        raise SandboxError("the OpenEnv server sent a frame that is not an object")
    if frame.get("type") == "error":
        data = frame.get("data")
        if not isinstance(data, dict):
            data = {}
        code, text = str(data.get("code", "UNKNOWN")), str(data.get("message", ""))
        if code in _MODEL_CODES:
            details = data.get("errors")
            if details:
                text = f"{text}: {json.dumps(details, ensure_ascii=False, default=str)}"
            raise StepRefused(text)
        raise SandboxError(f"the OpenEnv server refused the session ({code}): {text}")
    return _outcome(frame)



class OpenEnvSession:
    """One OpenEnv session (one environment instance on the server), opened by
    :meth:`open` and ended by :meth:`close`; used from one event loop."""

    def __init__(self, base_url: str, *, connect_timeout_s: float = 30.0) -> None:
        self.base_url = base_url
        self.connect_timeout_s = connect_timeout_s
        self._ws: ClientConnection | None = None
        self._lock = asyncio.Lock()
        self._stale = 0  # replies of cancelled requests still to come
        self._late: list[StepOutcome] = []  # those that came, read before a later reply
        self._lost: str | None = None

    async def open(self) -> None:
        try:
            self._ws = await connect(ws_url(self.base_url), open_timeout=self.connect_timeout_s,
                                     max_size=_MAX_FRAME, ping_interval=20, ping_timeout=20,
                                     proxy=None)
        except (OSError, WebSocketException, asyncio.TimeoutError) as exc:
            raise SandboxError(f"cannot open an OpenEnv session at {self.base_url}: "
                               f"{type(exc).__name__}: {exc}") from None

    async def reset(self, **kwargs: Any) -> StepOutcome:
        return await self._exchange({"type": "reset", "data": kwargs})

    async def step(self, action: dict[str, Any]) -> StepOutcome:
        return await self._exchange({"type": "step", "data": action})

    async def _exchange(self, message: dict[str, Any]) -> StepOutcome:
        async with self._lock:
            ws = self._ws
            if ws is None or self._lost is not None:
                raise SandboxError(self._gone(self._lost or "not open"))
            try:
                await ws.send(json.dumps(message, ensure_ascii=False))
                self._stale += 1  # until this request's reply is read (see the module doc)
                while True:
                    raw = await ws.recv()
                    self._stale -= 1
                    if self._stale == 0:
                        break
                    with contextlib.suppress(SandboxError, StepRefused):
                        self._late.append(_parse(raw))
            except (OSError, WebSocketException) as exc:
                self._lost = f"{type(exc).__name__}: {exc}"
                raise SandboxError(self._gone(self._lost)) from None
        return _parse(raw)

    def take_late(self) -> list[StepOutcome]:
        """The outcomes of steps whose callers gave up (the tool timeout) before their
        replies came, read since the last call: the steps ran, so their rewards and
        ``done`` count."""
        late, self._late = self._late, []
        return late

    def _gone(self, why: str) -> str:
        return f"the OpenEnv session at {self.base_url} is gone ({why})"

    async def close(self) -> None:
        """Say goodbye (the server frees the session's environment) and close; errors
        are ignored (a dead server has nothing to free)."""
        ws, self._ws = self._ws, None
        if ws is None:
            return
        with contextlib.suppress(OSError, WebSocketException, asyncio.TimeoutError):
            if self._lost is None:
                await asyncio.wait_for(ws.send('{"type": "close"}'), _CLOSE_WAIT_S)
            await asyncio.wait_for(ws.close(), _CLOSE_WAIT_S)


def _get_json(client: httpx.Client, method: str, url: str, **kwargs: Any) -> Any:
    try:
        response = client.request(method, url, **kwargs)
        response.raise_for_status()
        return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise SandboxError(f"{method} {url} failed: {type(exc).__name__}: {exc}") from None


def fetch_action_schema(base_url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The JSON schema of the server's ``Action`` model (``GET /schema``)."""
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        body = _get_json(client, "GET", f"{base_url}/schema")
    action = body.get("action") if isinstance(body, dict) else None
    if not isinstance(action, dict):
        raise SandboxError(f"GET {base_url}/schema has no action schema")
    return action


def list_mcp_tools(base_url: str, timeout_s: float = 30.0) -> list[dict[str, Any]] | None:
    """The tools an MCP environment lists (``tools/list`` on ``POST /mcp``), or ``None``
    when the environment is not an MCP one (the server answers a JSON-RPC error)."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        body = _get_json(client, "POST", f"{base_url}/mcp", json=request)
    if not isinstance(body, dict) or ("error" in body and body["error"] is not None):
        return None
    tools = (body.get("result") or {}).get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise SandboxError(f"tools/list at {base_url}/mcp answered no list of tools")
    return tools

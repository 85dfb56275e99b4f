"""One open envhub session seen as an MCP server: the mapping every MCP door shares.

:func:`session_mcp_server` builds an MCP server (the official SDK's lowlevel
:class:`mcp.server.lowlevel.Server`) bound to one already-open session of any transport
(:class:`~envhub.protocol.SessionHandle`): ``tools/list`` is the session's tools with their
own JSON schemas, ``tools/call`` is one step with one call, the task's messages are the
prompt ``task`` and the resource ``envhub://task``, and the final result is the resource
``envhub://reward`` once the episode has ended. The stdio command, the hosted Streamable
HTTP endpoint and the per-episode server of external agents (:func:`serve_session_mcp`)
all serve servers built here, so the mapping cannot differ between them.

User turns (:meth:`envhub.Environment.next_user_turn`): MCP has no final answer, so a
user turn reaches an MCP client only after a terminal tool. That call's result text then
ends with the user's message(s) (``[user] ...``, also in ``_meta["envhub/user_messages"]``)
and the episode goes on; when the tool list changed, the text says so,
``_meta["envhub/tools_changed"]`` is true and ``tools/list`` answers the new list (no
``notifications/tools/list_changed`` is sent: the client learns of it from this result).

Rewards: a ``tools/call`` result's ``_meta`` carries ``envhub/done``, the turn's reward
``envhub/turn_reward`` when the environment gives one
(:meth:`envhub.Environment.turn_reward`: every call is a turn), and, on the call that
ended the episode, the final ``envhub/reward`` and ``envhub/stop_reason``; the reward is
never in the text the model reads.

What the model did wrong stays the model's: an ``is_error`` observation (unknown tool,
bad arguments, a tool's exception or timeout) and a call after the episode ended are tool
results with ``isError`` and the same model-readable text the envhub API gives. What the
client did wrong (a refused call) or the infrastructure (a sandbox, the transport) is an
MCP error, so a harness can tell the two apart and mask the episode.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.types as types
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import AnyHttpUrl

from envhub._util.asgi import ClosingStreams, serve_in_loop, socket_url
from envhub._util.net import bound_socket
from envhub.errors import EnvhubError, SessionClosed
from envhub.protocol import SessionHandle
from envhub.types import Message, SessionStart, StepResult, ToolCall

__all__ = [
    "PROMPT_NAME",
    "REWARD_URI",
    "TASK_URI",
    "SessionDoor",
    "door_instructions",
    "door_server",
    "mcp_error",
    "serve_session_mcp",
    "session_mcp_server",
]

PROMPT_NAME = "task"
TASK_URI = "envhub://task"
REWARD_URI = "envhub://reward"
_JSON = "application/json"

# ``_meta`` keys on a tools/call result: the step's outcome beyond the observation text.
META_DONE = "envhub/done"
META_REWARD = "envhub/reward"
META_TURN_REWARD = "envhub/turn_reward"
META_STOP_REASON = "envhub/stop_reason"
META_USER_MESSAGES = "envhub/user_messages"
META_TOOLS_CHANGED = "envhub/tools_changed"


def _text(content: Any) -> str:
    """A chat message's content as text: a string as is, text parts joined, else JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        return "\n".join(str(p.get("text", "")) for p in content)
    return json.dumps(content, ensure_ascii=False, default=str)


# envhub error codes that mean the client asked for something wrong, not a failure
_CLIENT_CODES = frozenset({"invalid_request", "unknown_environment", "unknown_task",
                           "session_not_found", "session_closed"})


def mcp_error(exc: EnvhubError) -> MCPError:
    """A core error as an MCP error: what the client asked wrong (an unknown task, a refused
    call) is ``INVALID_PARAMS``; anything else (sandbox, environment, transport, capacity)
    is the server's, ``INTERNAL_ERROR``. ``data.code`` carries envhub's error code."""
    code = types.INVALID_PARAMS if exc.code in _CLIENT_CODES else types.INTERNAL_ERROR
    return MCPError(code, exc.message or str(exc), data={"code": exc.code})


class SessionDoor:
    """The MCP handlers of one envhub session (what :func:`session_mcp_server` serves).

    Every ``tools/call`` is one turn of the session (``step`` with one call), so turn
    budgets count MCP calls; the session serialises concurrent calls.
    """

    def __init__(self, session: SessionHandle, start: SessionStart, *, env_name: str) -> None:
        self.session = session
        self.start = start
        self.env_name = env_name
        self.tools = _mcp_tools(start.tools)
        self._call_ids: Iterator[int] = itertools.count(1)
        self._ended: StepResult | None = None  # the step that ended the episode

    # -- tools -----------------------------------------------------------------------------

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await self.call(params.name, params.arguments or {})

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """One ``tools/call``: one step with one call (the SDK's handler and the hosted
        endpoint's lean path both come here)."""
        call = ToolCall(id=f"mcp-{next(self._call_ids)}", name=name, arguments=arguments)
        try:
            result = await self.session.step([call])
        except SessionClosed as exc:
            return self._after_end(exc)
        except EnvhubError as exc:
            raise mcp_error(exc) from exc
        if result.done:
            self._ended = result
        observation = result.observations[0]
        text = observation.content
        meta: dict[str, Any] = {META_DONE: result.done}
        if result.turn_reward is not None:
            meta[META_TURN_REWARD] = result.turn_reward
        if result.done:
            meta[META_REWARD] = result.reward
            meta[META_STOP_REASON] = result.stop_reason
        if result.user_messages:
            meta[META_USER_MESSAGES] = result.user_messages
            text += "".join(f"\n\n[user] {_text(m.get('content'))}" for m in result.user_messages)
        if result.tools is not None:
            self.tools = _mcp_tools(result.tools)
            meta[META_TOOLS_CHANGED] = True
            text += "\n\n[the tool list changed: list the tools again]"
        return types.CallToolResult(
            content=[types.TextContent(text=text)], is_error=observation.is_error, meta=meta
        )

    def _after_end(self, exc: SessionClosed) -> types.CallToolResult:
        """A call after the episode ended: a tool error the model can read, not a crash."""
        if self._ended is not None:
            text = (
                f"Error: the episode has ended (stop_reason={self._ended.stop_reason}); "
                "no further tool calls are run"
            )
        else:
            text = f"Error: the episode has ended; no further tool calls are run ({exc.message})"
        return types.CallToolResult(
            content=[types.TextContent(text=text)], is_error=True, meta={META_DONE: True}
        )

    # -- the task: a prompt and a resource -------------------------------------------------

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[types.Prompt(
            name=PROMPT_NAME, description=self._task_description(),
        )])

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name != PROMPT_NAME:
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {params.name!r}; "
                                                 f"this server has one: {PROMPT_NAME!r}")
        return types.GetPromptResult(
            description=self._task_description(),
            messages=[_prompt_message(m) for m in self.start.messages],
        )

    def _task_description(self) -> str:
        return (f"{self.env_name} task {self.start.task_id} (envhub session "
                f"{self.start.session_id}); MCP prompts have no system role, so system "
                f"messages come as user messages ({TASK_URI} has them verbatim)")

    # -- resources -------------------------------------------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(
                name="task", uri=TASK_URI, mime_type=_JSON,
                description="the task: its id, the envhub session id and the chat messages "
                            "(OpenAI form) the episode starts with",
            ),
            types.Resource(
                name="reward", uri=REWARD_URI, mime_type=_JSON,
                description="the final reward, its components, stop reason and metrics; "
                            "readable once the episode has ended (reading it closes the session)",
            ),
        ])

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if params.uri == TASK_URI:
            text = json.dumps({
                "env": self.env_name,
                "task_id": self.start.task_id,
                "session_id": self.start.session_id,
                "messages": self.start.messages,
            }, ensure_ascii=False, default=str)
        elif params.uri == REWARD_URI:
            text = await self._reward_json()
        else:
            raise MCPError(types.INVALID_PARAMS, f"unknown resource {params.uri!r}; "
                                                 f"this server has {TASK_URI} and {REWARD_URI}")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, mime_type=_JSON, text=text)]
        )

    async def _reward_json(self) -> str:
        """The session's close result, once the episode ended (closing a finished session
        only scores it, which the session does once and keeps)."""
        try:
            info = await self.session.info()
            if not (info.done or info.closed):
                raise MCPError(
                    types.INVALID_REQUEST,
                    f"the episode is still running (turn {info.metrics.turns}); the reward is "
                    "readable once it ends (a terminal tool, the turn or time budget)",
                )
            result = await self.session.close()
        except SessionClosed as exc:  # aborted: there is nothing to score
            raise MCPError(types.INVALID_REQUEST, exc.message, data={"code": exc.code}) from exc
        except EnvhubError as exc:
            raise mcp_error(exc) from exc
        return result.model_dump_json()


def _mcp_tools(schemas: list[dict[str, Any]]) -> list[types.Tool]:
    """OpenAI tool schemas as MCP tools."""
    return [
        types.Tool(
            name=schema["function"]["name"],
            description=schema["function"].get("description"),
            input_schema=schema["function"].get("parameters")
            or {"type": "object", "properties": {}},
        )
        for schema in schemas
    ]


def _prompt_message(message: Message) -> types.PromptMessage:
    role: types.Role = "assistant" if message.get("role") == "assistant" else "user"
    text = _text(message.get("content"))
    return types.PromptMessage(role=role, content=types.TextContent(text=text))


def session_mcp_server(
    session: SessionHandle, start: SessionStart, *, env_name: str
) -> Server[Any]:
    """An MCP server bound to one already-open envhub ``session`` (started as ``start``).

    The caller owns the session: the server never closes or aborts it, except that reading
    ``envhub://reward`` after the episode ended closes (scores) it. Serve it over any MCP
    transport (``server.run`` on stdio streams, ``server.streamable_http_app()``).
    """
    return door_server(SessionDoor(session, start, env_name=env_name))


def door_server(door: SessionDoor) -> Server[Any]:
    """The MCP server of ``door``'s handlers (:func:`session_mcp_server`); a caller that also
    answers some requests itself (the hosted endpoint's lean path) keeps ``door`` so both
    see the same tool list and call counter."""
    from envhub import __version__

    return Server(
        f"envhub-{door.env_name}",
        version=__version__,
        instructions=door_instructions(door),
        on_list_tools=door.list_tools,
        on_call_tool=door.call_tool,
        on_list_prompts=door.list_prompts,
        on_get_prompt=door.get_prompt,
        on_list_resources=door.list_resources,
        on_read_resource=door.read_resource,
    )


def door_instructions(door: SessionDoor) -> str:
    """The ``instructions`` of ``door``'s server (:func:`door_server`): the only part of an
    ``initialize`` answer that differs between the sessions of one environment, so the
    hosted endpoint's lean path can answer ``initialize`` from one environment's answer."""
    return (f"One episode of the envhub environment {door.env_name!r} (task "
            f"{door.start.task_id}). The task is the prompt {PROMPT_NAME!r} (and {TASK_URI}); "
            f"solve it with the tools; the final reward is {REWARD_URI} once the episode has "
            "ended.")


class _OneToken:
    """The MCP SDK's bearer check (:class:`~mcp.server.auth.provider.TokenVerifier`) for a
    server with a single client: it accepts that client's token, and nothing else."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if not secrets.compare_digest(token.encode(), self.token.encode()):
            return None
        return AccessToken(token=token, client_id="envhub-agent", scopes=[])


@asynccontextmanager
async def serve_session_mcp(
    session: SessionHandle,
    start: SessionStart,
    *,
    env_name: str,
    host: str = "127.0.0.1",
    token: str | None = None,
) -> AsyncIterator[str]:
    """Serve one session's MCP server over Streamable HTTP on an ephemeral port of ``host``
    and yield its URL (``http://host:port/mcp``); the server stops on exit.

    With ``token``, every request must carry ``Authorization: Bearer <token>`` and is
    answered 401 otherwise: any local process can find the port, and only the client the
    token was given to may play the episode. uvicorn runs in the caller's event loop (a
    per-episode server for an agent framework in the same process) without taking over
    the process's signal handlers; on exit, clients that are still connected are cut off
    rather than waited for.
    """
    sock = bound_socket(host)
    origin = socket_url(sock, host)
    auth, verifier = None, None
    if token is not None:  # this server issued the token: it is its own issuer
        auth = AuthSettings(issuer_url=AnyHttpUrl(origin), resource_server_url=None)
        verifier = _OneToken(token)
    server = session_mcp_server(session, start, env_name=env_name)
    app = ClosingStreams(server.streamable_http_app(
        host=host, json_response=True, auth=auth, token_verifier=verifier,
    ))  # fmt: skip
    async with serve_in_loop(app, sock=sock, timeout_graceful_shutdown=5):
        try:
            yield f"{origin}/mcp"
        finally:
            app.close()  # clients still connected must not hold the server open

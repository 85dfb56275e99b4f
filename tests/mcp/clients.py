"""The official MCP client SDK, connected the ways users connect it: Streamable HTTP to
``envhub serve --mcp`` and stdio to an ``envhub mcp`` subprocess; plus the same calls
through the envhub API, to compare."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent, TextResourceContents
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

from envhub.protocol import EnvironmentClient
from envhub.types import CloseResult, Observation, ToolCall

ROOT = Path(__file__).resolve().parents[2]

#: a raw initialize request and the Accept header Streamable HTTP requires, for tests
#: that speak to the door byte by byte rather than through the SDK
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1],
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}

# One episode per environment: a valid call, malformed arguments, an unknown tool, then
# the task's gold calls (reward 1).
PROBE_CALLS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "calc": [("calculate", {"expression": "2 + 3"}), ("calculate", {"expr": 7}),
             ("no_such_tool", {"x": 1})],
    "sql": [("list_tables", {}), ("run_sql", {"query": 7, "extra": True}),
            ("no_such_tool", {})],
}
TASKS = {"calc": "calc-0-00007", "sql": "chinook-0000"}


@asynccontextmanager
async def http_session(url: str, *, token: str | None = None,
                       seen: list[httpx2.Response] | None = None) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session over Streamable HTTP; ``seen`` collects the
    HTTP responses (to read headers)."""
    async def record(response: httpx2.Response) -> None:
        if seen is not None:
            seen.append(response)

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0),
                           event_hooks={"response": [record]}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(*args: str, initialize: bool = True) -> AsyncIterator[ClientSession]:
    """An MCP client session with an ``envhub mcp ARGS`` subprocess."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "envhub.cli", "mcp", *args],
                                   cwd=ROOT)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        if initialize:
            await session.initialize()
        yield session


def text_of(result: CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, TextContent)
    return content.text


async def mcp_episode(session: ClientSession, calls: list[tuple[str, dict[str, Any]]]
                      ) -> tuple[list[tuple[str, bool]], dict[str, Any]]:
    """Each call's (text, isError), then the reward resource."""
    observed = []
    for name, arguments in calls:
        result = await session.call_tool(name, arguments)
        observed.append((text_of(result), result.is_error))
    return observed, await resource_json(session, "envhub://reward")


async def resource_json(session: ClientSession, uri: str) -> Any:
    (contents,) = (await session.read_resource(uri)).contents
    assert isinstance(contents, TextResourceContents)
    return json.loads(contents.text)


async def api_episode(env: EnvironmentClient, task_id: str,
                      calls: list[tuple[str, dict[str, Any]]]
                      ) -> tuple[list[tuple[str, bool]], CloseResult]:
    """The same calls, one per turn, through the envhub API."""
    observed = []
    async with env.open(task_id) as session:
        for i, (name, arguments) in enumerate(calls):
            result = await session.step([ToolCall(id=f"c{i}", name=name, arguments=arguments)])
            (obs,) = result.observations
            observed.append(_pair(obs))
    return observed, await session.close()


def _pair(obs: Observation) -> tuple[str, bool]:
    return obs.content, obs.is_error


def same_result(mcp_reward: dict[str, Any], api: CloseResult) -> None:
    """The reward resource says what the API's close said (tool time aside)."""
    expected = api.model_dump(mode="json")
    for result in (mcp_reward, expected):
        result["metrics"].pop("env_s")
    assert mcp_reward == expected

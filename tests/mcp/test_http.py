"""``envhub serve --mcp``: the official MCP client SDK drives hosted environments over
Streamable HTTP, and gets what the envhub API gives for the same calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION, TextContent
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

import envhub
from envhub.clients.remote import RemoteEnvironment
from envhub.testing import serve_in_thread
from tests.mcp.clients import (
    PROBE_CALLS,
    TASKS,
    api_episode,
    http_session,
    mcp_episode,
    resource_json,
    same_result,
    text_of,
)
from tests.mcp.conftest import MAX_BODY, MAX_TURNS, TOKEN

INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1], "capabilities": {},
               "clientInfo": {"name": "raw", "version": "0"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def mcp_error_in(exc: BaseException) -> MCPError:
    """The MCPError a failed connect raised, out of the SDK's exception groups."""
    if isinstance(exc, MCPError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = mcp_error_in(inner)
        if found is not None:
            return found
    raise AssertionError(f"no MCPError in {exc!r}") from exc


async def connect_error(url: str, **kwargs: Any) -> MCPError:
    with pytest.raises(BaseException) as caught:
        async with http_session(url, **kwargs) as session:
            await session.list_tools()
    return mcp_error_in(caught.value)


@pytest.mark.parametrize("env", ["calc", "sql"])
async def test_tools_calls_and_reward_match_the_api(url: str, env: str) -> None:
    task = envhub.make(env).tasks.get(TASKS[env])
    calls = [*PROBE_CALLS[env], *((g.name, g.arguments) for g in task.gold_actions)]
    async with RemoteEnvironment(url, env) as remote:
        info = await remote.info()
        async with http_session(f"{url}/mcp/{env}?task_id={task.id}") as session:
            tools = (await session.list_tools()).tools
            assert [(t.name, t.description, t.input_schema) for t in tools] == [
                (f["function"]["name"], f["function"]["description"], f["function"]["parameters"])
                for f in info.tools
            ]
            with pytest.raises(MCPError, match="still running"):
                await session.read_resource("envhub://reward")
            observed, reward = await mcp_episode(session, calls)
            after = await session.call_tool(*calls[0])
        expected, closed = await api_episode(remote, task.id, calls)
    assert observed == expected
    assert [is_error for _, is_error in observed[1:3]] == [True, True]  # bad arguments, no tool
    assert "unknown tool 'no_such_tool'" in observed[2][0]
    same_result(reward, closed)
    assert reward["reward"] == 1.0 and reward["stop_reason"] == "terminal_tool"
    assert after.is_error and text_of(after) == (
        "Error: the episode has ended (stop_reason=terminal_tool); no further tool calls are run")


async def test_prompt_resources_session_header_and_close(url: str) -> None:
    task = envhub.make("calc").tasks.get(TASKS["calc"])
    seen: list[httpx2.Response] = []
    steps_before = await _steps(url)
    async with http_session(f"{url}/mcp/calc?task_id={task.id}", seen=seen) as session:
        prompts = (await session.list_prompts()).prompts
        assert [p.name for p in prompts] == ["task"]
        prompt = await session.get_prompt("task")
        assert [(m.role, m.content) for m in prompt.messages] == [
            ("user", TextContent(text=m["content"])) for m in task.prompt
        ]  # MCP prompts have no system role
        described = await resource_json(session, "envhub://task")
        assert described["messages"] == task.prompt and described["task_id"] == task.id
        session_id = described["session_id"]
        assert {r.headers.get("envhub-session-id") for r in seen} == {session_id}
        assert text_of(await session.call_tool("calculate", {"expression": "6 * 7"})) == "42"
        state = await _get(f"{url}/v1/sessions/{session_id}")
        assert (state["env"], state["task_id"], state["closed"]) == ("calc", task.id, False)
        assert state["metrics"]["tool_calls"] == 1
        assert await _steps(url) == steps_before + 1
    # leaving the client DELETEs the MCP session, which closes (scores) the envhub session
    state = await _get(f"{url}/v1/sessions/{session_id}")
    assert state["closed"] and state["stop_reason"] == "closed"


async def _get(url: str) -> Any:
    async with httpx.AsyncClient() as http:
        return (await http.get(url)).json()


async def _steps(url: str) -> float:
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{url}/metrics")).text
    prefix = 'envhub_steps_total{env="calc"}'
    line = next((x for x in metrics.splitlines() if x.startswith(prefix)), None)
    return float(line.split()[-1]) if line else 0.0


async def test_task_from_seed_or_initialize_meta(url: str) -> None:
    async with RemoteEnvironment(url, "calc") as remote:
        seeded = await remote.open(seed=11)
        await seeded.close()
    async with http_session(f"{url}/mcp/calc?seed=11") as session:
        assert (await resource_json(session, "envhub://task"))["task_id"] == seeded.task_id
    body = {**INITIALIZE, "params": {**INITIALIZE["params"],
                                     "_meta": {"envhub/task_id": "calc-0-00003"}}}
    async with httpx.AsyncClient(base_url=url, headers=ACCEPT) as http:
        answer = await http.post("/mcp/calc", json=body)
        assert answer.status_code == 200
        assert "calc-0-00003" in answer.json()["result"]["instructions"]
        session_id = answer.headers["envhub-session-id"]
        state = (await http.get(f"/v1/sessions/{session_id}")).json()
        assert state["task_id"] == "calc-0-00003"
        mcp_session = {"Mcp-Session-Id": answer.headers["mcp-session-id"]}
        assert (await http.delete("/mcp/calc", headers=mcp_session)).status_code == 200
        assert (await http.get(f"/v1/sessions/{session_id}")).json()["closed"]


async def test_a_sessionless_client_falls_back_to_the_handshake(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, headers=ACCEPT) as http:
        probe = await http.post("/mcp/calc", headers={"Mcp-Protocol-Version": "2026-07-28"},
                          json={"jsonrpc": "2.0", "id": 7, "method": "server/discover"})
        assert probe.status_code == 400
        assert probe.json()["id"] == 7
        assert probe.json()["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    async with Client(f"{url}/mcp/calc") as client:  # mode="auto": discover, then initialize
        assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        result = await client.call_tool("calculate", {"expression": "1 + 1"})
        assert isinstance(result.content[0], TextContent) and result.content[0].text == "2"


async def test_unknown_environment_or_task_at_initialization(url: str) -> None:
    error = await connect_error(f"{url}/mcp/nope")
    assert error.code == INVALID_PARAMS and error.data == {"code": "unknown_environment"}
    assert "'nope' is not hosted here (hosted: calc, sql)" in error.message
    error = await connect_error(f"{url}/mcp/calc?task_id=calc-9-99999")
    assert error.code == INVALID_PARAMS and error.data == {"code": "unknown_task"}
    assert "calc-9-99999" in error.message
    async with httpx.AsyncClient(base_url=url, headers=ACCEPT) as http:
        assert (await http.post("/mcp/nope", json=INITIALIZE)).status_code == 404
        unknown = await http.post("/mcp/calc?task_id=calc-9-99999", json=INITIALIZE)
        assert unknown.status_code == 404 and unknown.json()["id"] == 1
        assert (await http.post("/mcp/calc?seed=x", json=INITIALIZE)).status_code == 400
        not_initialize = await http.post("/mcp/calc", json={"jsonrpc": "2.0", "id": 2,
                                                            "method": "tools/list"})
        assert not_initialize.status_code == 400 and "must be initialize" in not_initialize.text
        gone = await http.post("/mcp/calc", headers={"Mcp-Session-Id": "f" * 32},
                               json=INITIALIZE)
        assert gone.status_code == 404
    async with http_session(f"{url}/mcp/calc") as session:  # still serving
        assert text_of(await session.call_tool("calculate", {"expression": "3 * 3"})) == "9"


async def test_the_turn_budget_ends_the_episode(strict_url: str) -> None:
    async with http_session(f"{strict_url}/mcp/calc", token=TOKEN) as session:
        for _ in range(MAX_TURNS):
            result = await session.call_tool("calculate", {"expression": "1 + 2"})
        assert result.meta is not None and result.meta["envhub/stop_reason"] == "max_turns"
        late = await session.call_tool("calculate", {"expression": "1 + 2"})
        assert late.is_error and "episode has ended (stop_reason=max_turns)" in text_of(late)
        reward = await resource_json(session, "envhub://reward")
        assert reward["stop_reason"] == "max_turns" and reward["metrics"]["turns"] == MAX_TURNS


async def test_oversize_arguments_are_refused_and_the_session_goes_on(strict_url: str) -> None:
    seen: list[httpx2.Response] = []
    async with http_session(f"{strict_url}/mcp/calc", token=TOKEN, seen=seen) as session:
        with pytest.raises(MCPError):
            await session.call_tool("calculate", {"expression": "1+" * MAX_BODY + "1"})
        assert seen[-1].status_code == 413
        assert text_of(await session.call_tool("calculate", {"expression": "2 * 4"})) == "8"


async def test_the_bearer_token_guards_the_mcp_endpoint(strict_url: str) -> None:
    for token in (None, "wrong"):
        seen: list[httpx2.Response] = []
        await connect_error(f"{strict_url}/mcp/calc", token=token, seen=seen)
        assert [r.status_code for r in seen] == [401]
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"{strict_url}/mcp/calc", json=INITIALIZE, headers=ACCEPT)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized"
    async with http_session(f"{strict_url}/mcp/calc", token=TOKEN) as session:
        assert text_of(await session.call_tool("calculate", {"expression": "5 - 1"})) == "4"


async def test_sessions_count_against_the_servers_capacity(mcp_app: Callable[..., Any]) -> None:
    with serve_in_thread(mcp_app(["calc"], max_sessions=1)) as base:
        seen: list[httpx2.Response] = []
        async with http_session(f"{base}/mcp/calc") as first:
            error = await connect_error(f"{base}/mcp/calc", seen=seen)
            assert error.data == {"code": "capacity"} and "maximum of 1" in error.message
            assert seen[-1].status_code == 429
            assert text_of(await first.call_tool("calculate", {"expression": "2 ** 5"})) == "32"
        async with http_session(f"{base}/mcp/calc") as second:  # the first one's place
            assert text_of(await second.call_tool("calculate", {"expression": "7 - 7"})) == "0"

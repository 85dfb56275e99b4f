"""``envhub mcp ENV``: the official MCP client SDK starts it as a subprocess and drives one
episode over stdio, getting what the in-process envhub API gives for the same calls."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

import envhub
from tests.mcp.clients import (
    PROBE_CALLS,
    TASKS,
    api_episode,
    mcp_episode,
    resource_json,
    same_result,
    stdio_session,
)


@pytest.mark.parametrize("env", ["calc", "sql"])
async def test_an_episode_over_stdio_matches_the_api(env: str) -> None:
    local = envhub.make(env)
    task = local.tasks.get(TASKS[env])
    calls = [*PROBE_CALLS[env], *((g.name, g.arguments) for g in task.gold_actions)]
    async with stdio_session(env, "--task", task.id) as session:
        tools = (await session.list_tools()).tools
        assert [(t.name, t.input_schema) for t in tools] == [
            (f["function"]["name"], f["function"]["parameters"]) for f in local.tools
        ]
        prompt = await session.get_prompt("task")
        assert [m.content.text for m in prompt.messages] == [m["content"] for m in task.prompt]
        assert (await resource_json(session, "envhub://task"))["messages"] == task.prompt
        observed, reward = await mcp_episode(session, calls)
    expected, closed = await api_episode(local, task.id, calls)
    assert observed == expected
    same_result(reward, closed)
    assert reward["reward"] == 1.0


@pytest.mark.parametrize(("args", "message", "code"), [
    (("calc", "--task", "calc-9-99999"), "unknown task 'calc-9-99999'", "unknown_task"),
    (("no-such-env",), "unknown environment 'no-such-env'", "unknown_environment"),
])
async def test_what_cannot_open_is_the_answer_to_initialize(
    args: tuple[str, ...], message: str, code: str
) -> None:
    async with stdio_session(*args, initialize=False) as session:
        with pytest.raises(MCPError) as refused:
            await session.initialize()
    assert message in refused.value.message
    assert (refused.value.code, refused.value.data) == (INVALID_PARAMS, {"code": code})

"""User turns through the MCP door: a terminal tool answered with a user turn returns the
user's message in its result, the episode goes on, and a changed tool list is flagged and
served by ``tools/list``."""

from __future__ import annotations

import envhub
from envhub.mcp.door import META_TOOLS_CHANGED, META_USER_MESSAGES, serve_session_mcp
from tests.core.user_turn_envs import LATE_TOOL, QUESTIONS, ScriptedUserEnv
from tests.mcp.clients import http_session, text_of


async def test_terminal_tool_results_carry_the_user_turn_and_the_tool_change() -> None:
    session = await envhub.make(ScriptedUserEnv).open("chat-0")
    start = await session.reset()
    async with serve_session_mcp(session, start, env_name="scripted-user") as url:
        async with http_session(url) as client:
            listed = sorted(t.name for t in (await client.list_tools()).tools)
            assert listed == ["add", "answer"]

            first = await client.call_tool("answer", {"value": "5"})
            assert text_of(first) == f"recorded\n\n[user] {QUESTIONS[1]}"
            assert first.meta is not None and first.meta["envhub/done"] is False
            assert first.meta[META_USER_MESSAGES] == [{"role": "user", "content": QUESTIONS[1]}]
            assert META_TOOLS_CHANGED not in first.meta

            second = await client.call_tool("answer", {"value": "15"})
            assert second.meta is not None and second.meta[META_TOOLS_CHANGED] is True
            assert text_of(second).endswith("[the tool list changed: list the tools again]")
            listed = sorted(t.name for t in (await client.list_tools()).tools)
            assert listed == ["add", "answer", LATE_TOOL]
            assert text_of(await client.call_tool(LATE_TOOL, {"a": 15, "b": 4})) == "60"

            last = await client.call_tool("answer", {"value": "60"})
            assert last.meta is not None and last.meta["envhub/done"] is True
            assert last.meta["envhub/reward"] == 1.0 and text_of(last) == "recorded"
    assert (await session.close()).reward == 1.0

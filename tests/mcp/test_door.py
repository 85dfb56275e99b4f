"""``serve_session_mcp``: one session its caller owns, served over Streamable HTTP for an
agent in the same process (the external-agent path)."""

from __future__ import annotations

import contextlib
import logging

import pytest
from mcp.shared.exceptions import MCPError

import envhub
from envhub.mcp.door import serve_session_mcp
from tests.mcp.clients import PROBE_CALLS, TASKS, api_episode, http_session, mcp_episode, text_of


async def test_a_served_session_stays_its_owners() -> None:
    env = envhub.make("calc")
    task = env.tasks.get(TASKS["calc"])
    calls = [*PROBE_CALLS["calc"], *((g.name, g.arguments) for g in task.gold_actions)]
    session = await env.open(task.id)
    start = await session.reset()
    async with serve_session_mcp(session, start, env_name="calc") as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        async with http_session(url) as client:  # a client that leaves ends nothing
            assert text_of(await client.call_tool(*calls[0])) == "5"
        async with http_session(url) as client:
            with pytest.raises(MCPError, match="still running"):
                await client.read_resource("envhub://reward")
            observed, reward = await mcp_episode(client, calls[1:])
    expected, closed = await api_episode(env, task.id, calls)
    assert observed == expected[1:]
    assert reward["reward"] == closed.reward == 1.0
    assert (await session.close()).reward == 1.0  # the owner's session, scored once


async def test_the_owner_closes_an_unfinished_episode() -> None:
    env = envhub.make("calc")
    session = await env.open(TASKS["calc"])
    async with serve_session_mcp(session, await session.reset(), env_name="calc") as url:
        async with http_session(url) as client:
            await client.call_tool("calculate", {"expression": "1 + 1"})
    assert not (await session.info()).closed
    result = await session.close()
    assert result.stop_reason == "closed" and result.metrics.tool_calls == 1


async def test_a_client_still_connected_does_not_hold_the_server_open() -> None:
    """uvicorn waits for open responses before it stops; the server cuts the clients'
    event streams instead, and each ends as a complete response."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    uvicorn_log = logging.getLogger("uvicorn")  # configured by the server's start: add after
    env = envhub.make("calc")
    session = await env.open(TASKS["calc"])
    try:
        async with serve_session_mcp(session, await session.reset(), env_name="calc") as url:
            uvicorn_log.addHandler(handler)
            connected = http_session(url)
            client = await connected.__aenter__()
            await client.call_tool("calculate", {"expression": "1 + 1"})
        with contextlib.suppress(Exception):  # its server is gone: the goodbye DELETE fails
            await connected.__aexit__(None, None, None)
    finally:
        uvicorn_log.removeHandler(handler)
        await session.close()
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []

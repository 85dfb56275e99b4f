"""OpenEnv's own clients driving an envhub environment through ``envhub serve --mcp``.

Runs in the OpenEnv venv (``.ci/openenv_setup.sh``): it imports only OpenEnv, FastMCP
(OpenEnv's MCP dependency) and the standard library, and prints one JSON object of what
each client saw, for test_reverse.py to check.

    python openenv_client.py http://127.0.0.1:8000/calc calc-0-00001 7 calc-0-00002

- ``MCPToolClient`` (OpenEnv's MCP client: HTTP ``/mcp`` plus its ``/ws`` socket): resets
  onto the first task, lists the tools, calls ``calculate`` over HTTP, answers right with
  a ``step`` (reward and done as OpenEnv surfaces them), calls after the end, state,
  malformed steps and resets; then resets onto the second task and answers wrong.
- ``GenericEnvClient`` (a socket of its own, no HTTP session): one episode, answered right.
- FastMCP's ``Client`` on the standard MCP door (``/mcp?task_id=``): one episode.

Gradio is kept out, as in openenv_servers.py: OpenEnv's ``env_server`` package imports it
for its web interface only, and importing it is most of this script's time (6 of 8 s).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

sys.modules["gradio"] = None  # type: ignore[assignment]  # import gradio: ModuleNotFoundError

from fastmcp import Client  # noqa: E402
from openenv.core.env_server.mcp_types import CallToolAction  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from openenv.core.mcp_client import MCPToolClient  # noqa: E402


async def _error_of(call: Any) -> str:
    """The error a call raised (OpenEnv's clients raise ``RuntimeError``), or its result."""
    try:
        return f"returned {await call!r}"
    except RuntimeError as exc:
        return str(exc)


async def mcp_tool_client(base: str, task: str, answer: str, other: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with MCPToolClient(base_url=base) as env:
        first = await env.reset(task_id=task)
        seen["reset"] = {"task_id": first.observation.task_id, "done": first.done,
                         "reward": first.reward}
        seen["tools"] = sorted(t.name for t in await env.list_tools())
        seen["calculate"] = await env.call_tool("calculate", expression="(3 + 4) * 2")
        seen["bad_expression"] = await env.call_tool("calculate", expression="2 +")
        right = await env.step(CallToolAction(tool_name="answer", arguments={"value": answer}))
        seen["answer"] = {"reward": right.reward, "done": right.done,
                          "stop_reason": right.metadata.get("envhub/stop_reason")}
        seen["after_end"] = await env.call_tool("calculate", expression="1")
        late = await env.step(CallToolAction(tool_name="calculate", arguments={"expression": "1"}))
        seen["after_end_step"] = {"error": late.observation.error.message, "done": late.done}
        state = await env.state()
        seen["state"] = {"episode_id": state.episode_id, "step_count": state.step_count}
        seen["bad_step"] = await _error_of(env.step({"not": "an action"}))
        seen["bad_reset"] = await _error_of(env.reset(difficulty="hard"))
        seen["unknown_task"] = await _error_of(env.reset(task_id="no-such-task"))
        await env.reset(task_id=other)
        wrong = await env.step(CallToolAction(tool_name="answer", arguments={"value": "-1"}))
        seen["wrong"] = {"reward": wrong.reward, "done": wrong.done}
    return seen


async def generic_client(base: str, task: str, answer: str) -> dict[str, Any]:
    async with GenericEnvClient(base_url=base) as env:
        await env.reset(task_id=task)
        result = await env.step({"type": "call_tool", "tool_name": "answer",
                                 "arguments": {"value": answer}})
        return {"reward": result.reward, "done": result.done}


async def fastmcp_client(base: str, task: str, answer: str) -> dict[str, Any]:
    async with Client(f"{base}/mcp?task_id={task}") as episode:
        tools = sorted(t.name for t in await episode.list_tools())
        calculated = await episode.call_tool("calculate", {"expression": "2+3"})
        result = await episode.call_tool("answer", {"value": answer})
        return {"tools": tools, "calculate": calculated.content[0].text,
                "meta": result.meta}


async def main() -> None:
    base, task, answer, other = sys.argv[1:5]
    print(json.dumps({
        "mcp_tool_client": await mcp_tool_client(base, task, answer, other),
        "generic_client": await generic_client(base, task, answer),
        "fastmcp": await fastmcp_client(base, task, answer),
    }))


if __name__ == "__main__":
    asyncio.run(main())

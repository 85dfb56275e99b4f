"""``envhub serve ENV --mcp``: the command line serves MCP with its token and budgets."""

from __future__ import annotations

from envhub.testing import serve_in_subprocess
from tests.mcp.clients import http_session, text_of


async def test_serve_mcp_from_the_command_line() -> None:
    with serve_in_subprocess("calc", "--mcp", "--max-turns", "2", token="cli-token") as url:
        async with http_session(f"{url}/mcp/calc?task_id=calc-0-00000", token="cli-token") as s:
            assert text_of(await s.call_tool("calculate", {"expression": "805 - 273"})) == "532"
            last = await s.call_tool("calculate", {"expression": "1 + 1"})
            assert last.meta is not None and last.meta["envhub/stop_reason"] == "max_turns"

"""A small MCP server for the failure tests, written with the official SDK: ``echo``
answers, ``hang`` never does, ``fail`` reports a tool error, ``word_count`` counts.

``python slow_server.py`` serves stdio; :func:`create_server` gives the server object
(the tests serve it over Streamable HTTP with ``streamable_http_app()``).
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def create_server() -> MCPServer:
    server = MCPServer("envhub-test-slow")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    async def hang() -> str:
        """Never return."""
        await anyio.sleep_forever()
        return "unreachable"

    @server.tool()
    def fail(reason: str) -> str:
        """Report a tool error with the reason."""
        raise ToolError(f"failed on purpose: {reason}")

    @server.tool()
    def word_count(text: str) -> int:
        """The number of whitespace-separated words in the text."""
        return len(text.split())

    return server


if __name__ == "__main__":
    anyio.run(create_server().run_stdio_async)

"""One envhub session served as an MCP server over stdin/stdout (``envhub mcp ENV``)."""

from __future__ import annotations

import sys
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from envhub.errors import EnvhubError
from envhub.mcp.door import mcp_error, session_mcp_server
from envhub.protocol import EnvironmentClient
from envhub.types import CloseResult

__all__ = ["refuse_stdio", "serve_stdio"]


async def serve_stdio(
    env: EnvironmentClient, task_id: str | None = None, *, seed: int | None = None
) -> CloseResult:
    """Open one session of ``env`` (``task_id``, else a pick seeded by ``seed``), serve it
    over this process's stdin/stdout until the client closes stdin, then close (score) it
    and return its result; the session is aborted if serving fails.

    A session that cannot open (an unknown task, a sandbox that does not start) is served
    as :func:`refuse_stdio` before the error is raised, so the MCP client reads the reason
    as the answer to its first request instead of a closed connection.

    While serving, stdout carries only MCP messages: the SDK points file descriptor 1 at
    stderr, so stray prints of tools or libraries cannot corrupt the stream.
    """
    try:
        session = await env.open(task_id, seed=seed)
    except EnvhubError as exc:
        await refuse_stdio(exc, name=env.name)
        raise
    try:
        start = await session.reset()
        server = session_mcp_server(session, start, env_name=env.name)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    except BaseException:
        await session.abort()
        raise
    return await session.close()


async def refuse_stdio(error: EnvhubError, *, name: str) -> None:
    """Answer every MCP request on stdin/stdout with ``error`` (as :func:`mcp_error` words
    it) until the client closes stdin: the handshake (or, on the sessionless protocol, the
    first request after ``server/discover``) fails with the reason. On a
    terminal (a person, not an MCP client) it returns at once."""
    if sys.stdin.isatty():
        return
    refusal = mcp_error(error)

    async def refuse(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.request_id is None:  # a notification gets no answer
            return None
        if ctx.method == "server/discover":  # era negotiation: the first real request says why
            return await call_next(ctx)
        raise MCPError(refusal.code, refusal.message, refusal.data)

    server: Server[Any] = Server(f"envhub-{name}")
    server.middleware.insert(0, refuse)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())

"""``envhub mcp ENV``: one episode of an environment as an MCP server over stdio.

An MCP client (Claude Code, Codex, an agent framework) starts the command; it opens one
in-process session, serves it until the client closes stdin, then scores it and prints
the result on stderr. The ``mcp`` SDK (``pip install 'envhub-rl[mcp]'``) is imported in the
body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from envhub.cli._app import app
from envhub.cli.options import EnvArgOption, SandboxBackendOption, env_options
from envhub.errors import EnvhubError, InvalidRequest

if TYPE_CHECKING:
    from envhub.protocol import EnvironmentClient
    from envhub.types import CloseResult

__all__ = ["mcp_command"]


@app.command("mcp")
def mcp_command(
    env: Annotated[str, typer.Argument(help="environment (plugin name or module:Class)")],
    task: Annotated[
        str | None, typer.Option("--task", help="task id (default: a pick seeded by --seed)")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the task pick without --task")] = None,
    env_arg: EnvArgOption = None,
    sandbox: SandboxBackendOption = None,
    max_turns: Annotated[int | None, typer.Option(help="max turns (tool calls)")] = None,
    tool_timeout: Annotated[float | None, typer.Option(help="tool-call timeout (s)")] = None,
    episode_timeout: Annotated[float | None, typer.Option(help="episode timeout (s)")] = None,
    max_output_chars: Annotated[int | None, typer.Option(help="tool output cut-off")] = None,
) -> None:
    """Serve one episode of ENV as an MCP server on stdin/stdout.

    Tools are the environment's, each call one turn; the task is the prompt `task` and the
    resource envhub://task; the final reward is envhub://reward once the episode ends.
    Add it to an MCP client as the command `envhub mcp ENV [--task ID]`.
    """
    import asyncio

    try:
        from envhub.clients.local import make
        from envhub.mcp.stdio import refuse_stdio
    except ImportError as exc:
        typer.echo(f"error: {exc.name} is missing: pip install 'envhub-rl[mcp]'", err=True)
        raise typer.Exit(2) from None
    (options,) = env_options([env], env_arg, sandbox)
    try:
        local = make(
            env, max_turns=max_turns, tool_timeout_s=tool_timeout,
            episode_timeout_s=episode_timeout, max_output_chars=max_output_chars, **options,
        )  # fmt: skip
    except (EnvhubError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        error = exc if isinstance(exc, EnvhubError) else InvalidRequest(str(exc))
        asyncio.run(refuse_stdio(error, name=env))  # the MCP client that started us reads why
        raise typer.Exit(2) from None
    try:
        result = asyncio.run(_serve(local, task, seed))
    except EnvhubError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"envhub mcp: {local.name} episode ended ({result.stop_reason}), "
               f"reward {result.reward:g}", err=True)


async def _serve(env: EnvironmentClient, task: str | None, seed: int | None) -> CloseResult:
    from envhub.mcp.stdio import serve_stdio

    try:
        return await serve_stdio(env, task, seed=seed)
    finally:
        await env.aclose()  # the environment's shared resources (sandbox pools, browsers)

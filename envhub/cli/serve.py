"""``envhub serve ENV [ENV...]``: host environments over HTTP with uvicorn.

The server keeps sessions in process memory, so it runs as one process per port;
scale out with several replicas behind a load balancer that routes by the session id in
the path. Server dependencies (``pip install envhub-rl[server]``) are imported in the body.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from envhub._util.gc_tuning import DEFAULT_GC_THRESHOLD, gc_tuned_for_throughput
from envhub.cli._app import app
from envhub.cli.options import (
    EnvArgOption,
    GcThresholdOption,
    SandboxBackendOption,
    env_options,
    require_listenable,
)
from envhub.errors import EnvhubError

__all__ = ["serve"]


@app.command("serve")
def serve(
    envs: Annotated[list[str], typer.Argument(help="environments (plugin name or module:Class)")],
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    max_sessions: Annotated[
        int, typer.Option(envvar="ENVHUB_MAX_SESSIONS", help="open sessions before 429")
    ] = 4096,
    session_ttl: Annotated[
        float, typer.Option(envvar="ENVHUB_SESSION_TTL", help="idle seconds before abort")
    ] = 600.0,
    max_body_bytes: Annotated[
        int, typer.Option(envvar="ENVHUB_MAX_BODY_BYTES", help="request size limit")
    ] = 4_194_304,
    token: Annotated[
        str | None,
        typer.Option(envvar="ENVHUB_TOKEN", help="require this bearer token"),
    ] = None,
    env_arg: EnvArgOption = None,
    max_turns: Annotated[
        int | None, typer.Option(envvar="ENVHUB_MAX_TURNS", help="max turns per episode")
    ] = None,
    tool_timeout: Annotated[
        float | None, typer.Option(envvar="ENVHUB_TOOL_TIMEOUT", help="tool-call timeout (s)")
    ] = None,
    episode_timeout: Annotated[
        float | None, typer.Option(envvar="ENVHUB_EPISODE_TIMEOUT", help="episode timeout (s)")
    ] = None,
    max_output_chars: Annotated[
        int | None, typer.Option(envvar="ENVHUB_MAX_OUTPUT_CHARS", help="tool output cut-off")
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    access_log: Annotated[bool, typer.Option(help="log every request")] = False,
    sandbox: SandboxBackendOption = None,
    gc_threshold: GcThresholdOption = DEFAULT_GC_THRESHOLD,
    sandbox_admission: Annotated[
        str | None,
        typer.Option(
            help='sandbox start limits per backend, JSON: \'{"docker": {"concurrency": 8, '
            '"rate": 5}}\' (fields: concurrency, rate, burst, jitter, wait_s, scope; "*": any '
            "backend); default: ENVHUB_SANDBOX_ADMISSION, else docs/sandboxes.md's defaults",
        ),
    ] = None,
    mcp: Annotated[
        bool,
        typer.Option(
            "--mcp", help="also serve each ENV as an MCP server at /mcp/ENV and /ENV/mcp "
            "(one ENV: also /mcp)",
        ),
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            envvar="ENVHUB_ALLOWED_HOSTS",
            help="also serve requests naming this host (repeatable; '*': any host and origin)",
        ),
    ] = None,
) -> None:
    """Serve ENVs at http://HOST:PORT (API under /v1, OpenAPI at /openapi.json) until Ctrl-C.

    --env-arg options apply to every hosted environment, --sandbox to those with a
    `sandbox` option; budget flags override theirs. The token and the limits can also come
    from ENVHUB_* environment variables (how an image's container is configured). --mcp
    adds a Streamable HTTP MCP endpoint per environment (one MCP session = one episode) at
    /mcp/ENV and /ENV/mcp, and at /mcp when one ENV is served: the paths ending in /mcp
    are for clients that rewrite any other path (MCP Inspector 0.15).
    Requests must name a loopback name, HOST or an --allowed-host in Host (and in Origin,
    when a browser sends one); listening on 0.0.0.0 or :: without --allowed-host takes
    any Host. Exits 2 when HOST:PORT cannot be listened on (a port in use: pass another
    --port), before it says it serves.
    """
    try:
        import uvicorn

        from envhub.server import build_app, raise_open_files_limit
    except ImportError as exc:
        typer.echo(f"error: {exc.name} is missing: pip install 'envhub-rl[server]'", err=True)
        raise typer.Exit(2) from None
    if mcp:
        try:
            from envhub.server.mcp import McpDoor  # noqa: F401  (the [mcp] extra is installed)
        except ImportError as exc:
            typer.echo(f"error: {exc.name} is missing: pip install 'envhub-rl[mcp]'", err=True)
            raise typer.Exit(2) from None
    from_env = os.environ.get("ENVHUB_SANDBOX_ADMISSION")
    if sandbox_admission is not None or from_env:
        # checked here, so a typo fails the command instead of masking every episode
        from envhub.sandboxes import configure_admission, parse_admission

        try:
            parse_admission(from_env or "", "ENVHUB_SANDBOX_ADMISSION")
            limits = parse_admission(sandbox_admission or "", "--sandbox-admission")
        except EnvhubError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        for backend, backend_limits in limits.items():
            configure_admission(backend, backend_limits)
    options_of = env_options(envs, env_arg, sandbox)
    try:
        application = build_app(
            envs, options_of, max_sessions=max_sessions, session_ttl_s=session_ttl,
            max_body_bytes=max_body_bytes, token=token or None, max_turns=max_turns,
            tool_timeout_s=tool_timeout, episode_timeout_s=episode_timeout,
            max_output_chars=max_output_chars, mcp=mcp, host=host,
            allowed_hosts=allowed_host or (),
        )  # fmt: skip
    except (EnvhubError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    hosted = application.state.store.envs
    raise_open_files_limit()
    require_listenable(host, port)
    typer.echo(
        f"envhub: serving {', '.join(hosted)} at http://{host}:{port}"
        f"{' (bearer token required)' if token else ''}",
        err=True,
    )
    if mcp:
        for name in hosted:
            also = f"/{name}/mcp" + (", /mcp" if len(hosted) == 1 else "")
            typer.echo(f"envhub: MCP (Streamable HTTP) at http://{host}:{port}/mcp/{name}"
                       f" (also {also})", err=True)
    # loop/http "auto" pick uvloop and httptools when installed ([server] extra pulls them).
    with gc_tuned_for_throughput(gc_threshold):
        uvicorn.run(
            application,
            host=host,
            port=port,
            log_level=log_level,
            access_log=access_log,
            backlog=max(2048, min(max_sessions, 65535)),
            timeout_keep_alive=30,
        )

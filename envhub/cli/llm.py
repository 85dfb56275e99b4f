"""``envhub llm serve``: the embedded local model as an OpenAI-compatible endpoint.

Lets a user try envhub rollouts with no API key and no network: it serves
SmolLM2-135M-Instruct (see :mod:`envhub.cli.llama_server`) until Ctrl-C. The launcher is
imported inside the command so that ``envhub --help`` does not pay for it.
"""

from __future__ import annotations

import typer

from envhub.cli._app import app

__all__ = ["DEFAULT_N_CTX", "llm_app"]

# envhub.cli.llama_server's DEFAULT_N_CTX, spelled out so that `envhub --help` does not import
# the launcher (asyncio, subprocess plumbing); tests/core/test_cli_startup.py holds them equal
DEFAULT_N_CTX = 4096

llm_app = typer.Typer(
    help="Serve a small local LLM (SmolLM2-135M, llama.cpp) as an OpenAI-compatible endpoint.",
    no_args_is_help=True,
)


@llm_app.command("serve")
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8080, help="TCP port to listen on."),
    n_ctx: int = typer.Option(DEFAULT_N_CTX, "--n-ctx", help="Context window in tokens."),
    threads: int | None = typer.Option(
        None, help="CPU threads for generation (default: half the CPUs)."
    ),
    server: str = typer.Option(
        "llama-cpp-python",
        help="llama-cpp-python (tool calls in chat) | llama-server (llama.cpp's own: token-id "
        "prompts on /completion, for --policy tito).",
    ),
) -> None:
    """Serve the local model at http://HOST:PORT/v1 until Ctrl-C.

    Point any OpenAI client at it with model name ``smollm2-135m``; with llama-cpp-python
    tool calls are supported (chat format ``chatml-function-calling``). llama-server also
    answers token-id prompts at http://HOST:PORT/completion.
    """
    from envhub.cli.llama_server import MODEL_NAME, SERVER_KINDS, serve_foreground
    from envhub.errors import PolicyError

    if server not in SERVER_KINDS:
        typer.echo(f"error: --server must be one of {', '.join(SERVER_KINDS)}", err=True)
        raise typer.Exit(2)
    typer.echo(f"serving {MODEL_NAME} at http://{host}:{port}/v1 (Ctrl-C to stop)", err=True)
    try:
        code = serve_foreground(
            host=host, port=port, n_ctx=n_ctx, threads=threads, server=server
        )
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    # 130/-2: stopped with Ctrl-C, which is how this command is meant to end.
    if code not in (0, 130, -2):
        raise typer.Exit(code)


app.add_typer(llm_app, name="llm")

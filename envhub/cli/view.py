"""``envhub view`` (a local web app over trajectory files) and ``envhub report`` (one
self-contained HTML file); :mod:`envhub.view` is imported inside the command bodies."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from envhub.cli._app import app
from envhub.cli.options import require_listenable
from envhub.errors import EnvhubError

__all__ = ["report_command", "view_command"]

console = Console(stderr=True)

CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="where the per-file indexes are kept (default: $ENVHUB_CACHE/view, "
        "~/.cache/envhub/view)",
    ),
]
TokenizerOption = Annotated[
    Path | None,
    typer.Option(
        "--tokenizer",
        help="a tokenizer folder or .gguf file to decode token ids with (needs transformers)",
    ),
]
ThresholdOption = Annotated[
    float, typer.Option("--success-threshold", help="reward at or above which a sample succeeds")
]


def _fail(message: str, code: str) -> typer.Exit:
    console.print(f"[red]error[/red] ({code}): {escape(message)}", soft_wrap=True)
    return typer.Exit(2)


def _missing_extra(exc: ImportError) -> typer.Exit:
    return _fail(f"{exc.name} is missing: pip install 'envhub-rl[view]'", "missing_extra")


@app.command("view")
def view_command(
    runs: Annotated[list[Path], typer.Argument(help="trajectory JSONL files (envhub rollout -o)")],
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0: any free one)")] = 8765,
    tokenizer: TokenizerOption = None,
    cache_dir: CacheDirOption = None,
    success_threshold: ThresholdOption = 1.0,
) -> None:
    """Browse runs in a local web app: summaries, charts, filterable episodes, chats,
    tokens, and run-vs-run comparison. Files still being written are followed live.

    Exits 2 when none of RUNS can be shown, or HOST:PORT cannot be listened on (a port in
    use: pass another --port)."""
    try:
        import uvicorn

        from envhub.view.app import create_app
        from envhub.view.catalog import Catalog
        from envhub.view.token_text import load_decoder
    except ImportError as exc:
        raise _missing_extra(exc) from None
    from envhub.runtime.cache import cache_root

    try:
        decoder = load_decoder(tokenizer) if tokenizer else None
    except EnvhubError as exc:
        raise _fail(str(exc), exc.code) from None
    catalog = Catalog(runs, cache_dir or cache_root("view"), success_threshold=success_threshold)
    shown = 0
    for entry in catalog.runs:
        try:
            catalog.index(entry.number, refresh=False).require_trajectories(whole_file=False)
            shown += 1
        except EnvhubError as exc:
            console.print(f"[yellow]warning[/yellow] ({exc.code}): {escape(str(exc))}")
    if not shown:
        raise _fail("none of the given files can be shown", "no_runs")
    require_listenable(host, port)
    console.print(f"envhub view: http://{host}:{port}/  (Ctrl-C stops)")
    try:
        uvicorn.run(
            create_app(catalog, decoder, host=host), host=host, port=port, log_level="warning"
        )
    finally:
        catalog.close()


@app.command("report")
def report_command(
    run: Annotated[Path, typer.Argument(help="trajectory JSONL file")],
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write")],
    episodes: Annotated[
        int, typer.Option("--episodes", min=0, help="worst and best episodes shown in full")
    ] = 5,
    tokenizer: TokenizerOption = None,
    cache_dir: CacheDirOption = None,
    success_threshold: ThresholdOption = 1.0,
) -> None:
    """Write one self-contained HTML report of a run (inline CSS and SVG, opens offline)."""
    try:
        from envhub.view.report import write_report
        from envhub.view.token_text import load_decoder
    except ImportError as exc:
        raise _missing_extra(exc) from None
    from envhub.runtime.cache import cache_root

    try:
        decoder = load_decoder(tokenizer) if tokenizer else None
        size = write_report(
            run, output, cache_dir=cache_dir or cache_root("view"), episodes=episodes,
            decoder=decoder, success_threshold=success_threshold,
        )  # fmt: skip
    except EnvhubError as exc:
        raise _fail(str(exc), exc.code) from None
    console.print(f"report: {output} ({size / 1024:.0f} KiB)")

"""The root ``envhub`` Typer application; command modules attach to it on import."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="envhub",
    help="envhub: environments, servers, sandboxes and rollouts for agentic RL.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

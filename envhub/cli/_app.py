"""The root ``envhub`` Typer application; command modules attach to it on import.

Like ``python -m`` and uvicorn's ``--app-dir``, the root command puts the working
directory (or ``--app-dir DIR``) first on ``sys.path`` before any command runs, so a
``module:Class`` environment id finds a module that sits next to the user; a console
script's own ``sys.path`` starts with its ``bin`` folder instead.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app", "use_app_dir"]

app = typer.Typer(
    name="envhub",
    help="envhub: environments, servers, sandboxes and rollouts for agentic RL.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    # Help texts are plain text: rich markup would swallow "envhub[ray]" as a style tag.
    # The root's mode reaches every sub-app and command.
    rich_markup_mode=None,
)


def use_app_dir(folder: Path) -> None:
    """Make ``module:Class`` ids import from ``folder`` first (idempotent)."""
    path = str(folder.resolve())
    if path not in sys.path:
        sys.path.insert(0, path)


@app.callback()
def _root(
    app_dir: Annotated[
        Path,
        typer.Option(
            "--app-dir",
            exists=True,
            file_okay=False,
            help="folder that module:Class environment ids are imported from first "
            "(default: the current directory, as with python -m)",
        ),
    ] = Path("."),
) -> None:
    use_app_dir(app_dir)

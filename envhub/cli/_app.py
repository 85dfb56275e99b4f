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
    # Help texts are plain text: rich markup would swallow "envhub-rl[ray]" as a style tag.
    # The root's mode reaches every sub-app and command.
    rich_markup_mode=None,
)


def use_app_dir(folder: Path) -> None:
    """Make ``module:Class`` ids import from ``folder`` first (idempotent)."""
    path = str(folder.resolve())
    if path not in sys.path:
        sys.path.insert(0, path)


def _print_versions(asked: bool) -> None:
    """``envhub --version``: envhub's distribution and version, then each installed
    plugin's with the environments it registers, from metadata alone (no plugin is
    imported, so a broken one is listed too)."""
    if not asked:
        return
    from importlib.metadata import version

    from envhub.registry import CORE_DISTRIBUTION, discover_environments

    typer.echo(f"{CORE_DISTRIBUTION} {version(CORE_DISTRIBUTION)}")
    plugins: dict[tuple[str, str], list[str]] = {}
    for spec in discover_environments().values():
        if spec.distribution is not None:
            plugins.setdefault((spec.distribution, spec.version or "?"), []).append(spec.name)
    for (distribution, plugin_version), envs in sorted(plugins.items()):
        typer.echo(f"{distribution} {plugin_version} ({', '.join(envs)})")
    raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_versions,
            help="print the versions of envhub-rl and of the installed plugins, and exit",
        ),
    ] = False,
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

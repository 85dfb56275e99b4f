"""``envhub list``, ``envhub info`` and ``envhub init``: discovering and creating plugins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from envhub.cli._app import app
from envhub.cli.options import EnvArgOption, parse_env_args
from envhub.errors import EnvhubError

console = Console()


@app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """List installed environments: name, version, tools, tasks; broken plugins show their error."""
    from envhub.clients.describe import describe_environments

    listings = describe_environments()
    if as_json:
        typer.echo(json.dumps([entry.model_dump(mode="json") for entry in listings], indent=2))
        return
    table = Table("name", "version", "tools", "tasks", "splits", "status")
    for entry in listings:
        table.add_row(
            entry.name,
            entry.version or "?",
            ", ".join(entry.tool_names),
            "" if entry.error else str(entry.tasks),
            ", ".join(entry.splits),
            "[red]" + entry.error + "[/red]" if entry.error else "[green]ok[/green]",
        )
    console.print(table)


@app.command("info")
def info_command(
    env: Annotated[str, typer.Argument(help="plugin name or module:Class")],
    env_arg: EnvArgOption = None,
) -> None:
    """Show an environment's options (all, and those a server's clients may set, with their
    bounds), tools with their JSON schemas, and a sample task."""
    from envhub.clients.local import LocalEnvironment
    from envhub.environment import option_names

    try:
        local = LocalEnvironment(env, parse_env_args(env_arg or []))
        info = local.describe()
    except EnvhubError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    tasks = local.tasks
    sample = next(iter(tasks), None)
    payload = {
        **info.model_dump(mode="json", exclude={"error"}),
        "options": option_names(local.env_class),
        "splits": {split: len(tasks.split(split)) for split in tasks.splits},
        "sample_task": sample.model_dump(mode="json") if sample else None,
    }
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))


@app.command("init")
def init_command(
    name: Annotated[str, typer.Argument(help="environment name, e.g. 'wordle'")],
    directory: Annotated[
        Path | None, typer.Option("--dir", help="where to create it (default: environments/NAME)")
    ] = None,
) -> None:
    """Scaffold a new environment plugin (a renamed copy of calc), ready for `pip install -e`."""
    from envhub.cli.scaffold import scaffold_plugin

    target = directory or Path("environments") / name
    try:
        created = scaffold_plugin(name, target)
    except EnvhubError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print(
        f"created [bold]{created}[/bold]; next: pip install -e {created} && pytest {created}"
    )

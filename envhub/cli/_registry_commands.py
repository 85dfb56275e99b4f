"""``envhub list``, ``envhub info`` and ``envhub init``: discovering and creating plugins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envhub.cli._app import app
from envhub.cli.options import EnvArgOption, parse_env_args, warn_tool_gaps
from envhub.errors import EnvhubError
from envhub.hub import INDEX_URL_ENV, PLUGIN_PREFIX

if TYPE_CHECKING:  # the models load with the command that uses them, not with the CLI
    from envhub.types import EnvironmentInfo

console = Console()


@app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """List installed environments: name, version, tools, tasks; broken plugins show their
    error, and those that need operator options (a server, a taskset) say which."""
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
            "" if entry.error or entry.needs_options else str(entry.tasks),
            ", ".join(entry.splits),
            _status(entry),
        )
    console.print(table)


def _status(entry: EnvironmentInfo) -> str:
    if entry.error:
        return f"[red]{escape(entry.error)}[/red]"
    if entry.needs_options:
        return f"[yellow]{escape(entry.needs_options)}[/yellow]"
    return "[green]ok[/green]"


@app.command("info")
def info_command(
    env: Annotated[
        str, typer.Argument(help="plugin name or module:Class; envhub-rl-NAME[==VERSION]: a card")
    ],
    env_arg: EnvArgOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print JSON (whole tool schemas and task) instead")
    ] = False,
    index: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help=f"show the card of plugin distribution ENV on this index (a plugin "
            f"distribution's name alone reads ${INDEX_URL_ENV}'s, else PyPI's)",
        ),
    ] = None,
) -> None:
    """Show an environment's options (all, and those a server's clients may set, with their
    bounds), budgets, tools with their parameters, and a sample task; warn on stderr about
    what the tool schemas leave the model to guess. For a plugin distribution on a package
    index (envhub-rl-NAME, or --index), show its card without installing it."""
    if index is not None or env.startswith(PLUGIN_PREFIX):
        _index_info(env, index, as_json)
        return
    from envhub.clients.local import LocalEnvironment
    from envhub.environment import option_names
    from envhub.tools import schema_gaps

    try:
        local = LocalEnvironment(env, parse_env_args(env_arg or []))
        tasks = local.tasks  # loaded first: info reports the tasks, not a declared count
        info = local.describe()
    except EnvhubError as exc:
        typer.echo(f"error: {exc}", err=True)  # one line on stderr, as every command
        raise typer.Exit(2) from None
    sample = next(iter(tasks), None)
    payload = {
        **info.model_dump(mode="json", exclude={"error"}),
        "options": option_names(local.env_class),
        "splits": {split: len(tasks.split(split)) for split in tasks.splits},
        "sample_task": sample.model_dump(mode="json") if sample else None,
    }
    if as_json:
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        _print_info(payload)
    warn_tool_gaps(schema_gaps(info.tools))


def _index_info(requirement: str, index: str | None, as_json: bool) -> None:
    """``envhub info`` of a plugin distribution on a package index: its card, read from
    the wheel without installing it."""
    from envhub.cli.hub import fail, print_card
    from envhub.hub.index import PackageIndex, resolve_index_url
    from envhub.hub.install import parse_requirement

    try:
        name, version = parse_requirement(requirement)
        with PackageIndex(resolve_index_url(index)) as hub:
            card, _ = hub.card(name, version)
    except EnvhubError as exc:
        raise fail(exc) from None
    if as_json:
        typer.echo(card.model_dump_json(indent=2))
    else:
        print_card(card)


def _print_info(payload: dict[str, Any]) -> None:
    """``envhub info``'s sections as text, for a person: the JSON's content with each schema
    in a few words (``--json`` has them whole); a parameter the model may leave out is
    marked ``?``."""
    splits = ", ".join(f"{split} {count}" for split, count in payload["splits"].items())
    console.print(
        f"[bold]{escape(payload['name'])}[/bold] {escape(payload['version'])}: "
        f"{payload['tasks']} tasks" + (f" ({escape(splits)})" if splits else "")
    )
    if payload["distribution"]:  # what `envhub rollout NAME==VERSION` pins
        console.print(f"distribution: {escape(payload['distribution'])} "
                      f"{escape(payload['distribution_version'] or '?')}")
    console.print(f"task set: {payload['task_set_hash']}", soft_wrap=True)
    client_options = payload["client_options"]
    if payload["options"]:
        options = Table("option", "a server's clients may set it", title="options",
                        title_justify="left")  # fmt: skip
        for name in payload["options"]:
            bounds = client_options.get(name)
            options.add_row(name, "no" if bounds is None else "yes: " + _schema_text(bounds))
        console.print(options)
    else:
        console.print("options: none")
    budgets = ", ".join(f"{key} {value}" for key, value in payload["budgets"].items())
    console.print(f"budgets: {escape(budgets)}")
    console.print(tools_table(payload["tools"]))
    sample = payload["sample_task"]
    if sample is not None:
        console.print(f"sample task [bold]{escape(sample['id'])}[/bold]:")
        for message in sample["prompt"]:
            console.print(f"  {message['role']}: {escape(str(message.get('content')))}")
        console.print(f"  answer: {escape(str(sample.get('answer')))}")


def tools_table(tools: list[dict[str, Any]]) -> Table:
    """Tool schemas as a table: each parameter with its schema in a few words, ``?`` after
    one the model may leave out (``envhub info``, and a card from an index)."""
    table = Table("tool", "parameters", "description", title="tools", title_justify="left")
    for entry in tools:
        function = entry.get("function", {})
        parameters = function.get("parameters", {})
        required = set(parameters.get("required", []))
        table.add_row(
            escape(str(function.get("name", "?"))),
            "\n".join(
                f"{escape(param)}{'' if param in required else '?'}: {_schema_text(schema)}"
                for param, schema in parameters.get("properties", {}).items()
            ),
            escape(str(function.get("description", ""))),
        )
    return table


def _schema_text(schema: dict[str, Any]) -> str:
    """A JSON schema in a few words, its type first: ``integer, minimum 1, maximum 10000``;
    ``any`` for ``{}`` (descriptions are left out: they have their own column)."""
    kind = schema.get("type")
    rest = [
        f"{key} {json.dumps(value)}"
        for key, value in schema.items()
        if key not in ("type", "description", "title")
    ]
    return escape(", ".join([*([str(kind)] if kind else []), *rest]) or "any")


@app.command("init")
def init_command(
    name: Annotated[str, typer.Argument(help="environment name, e.g. 'wordle'")],
    directory: Annotated[
        Path | None, typer.Option("--dir", help="where to create it (default: environments/NAME)")
    ] = None,
    template: Annotated[
        str,
        typer.Option(
            help="minimal: one tool, one reward, a task file; calc: a renamed copy of the "
            "calc starter (seeded task generation, a rubric)"
        ),
    ] = "minimal",
) -> None:
    """Scaffold a new environment plugin, ready for `pip install -e`; a NAME that an installed
    plugin or an importable module already has is refused (exit 2)."""
    from envhub.cli.scaffold import scaffold_plugin

    target = directory or Path("environments") / name
    try:
        created = scaffold_plugin(name, target, template)
    except EnvhubError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    console.print(
        f"created [bold]{escape(str(created))}[/bold]; next: pip install -e {escape(str(created))}"
        f" && pytest {escape(str(created))}",
        soft_wrap=True,
    )

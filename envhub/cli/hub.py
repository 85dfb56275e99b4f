"""``envhub publish``, ``envhub search`` and ``envhub install``: plugins on a package index
(``envhub info envhub-rl-NAME`` shows one card, in :mod:`envhub.cli._registry_commands`).

The work is :mod:`envhub.hub`'s, imported in the command bodies (``envhub --help`` pays
for no HTTP client). Every failure is one line on stderr and exit 2; a check that fails
after an install is exit 1, as ``envhub check``'s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from envhub.cli._app import app
from envhub.errors import EnvhubError
from envhub.hub import INDEX_URL_ENV

if TYPE_CHECKING:
    from envhub.hub.card import Card

__all__ = ["IndexOption", "fail", "print_card"]

console = Console()
stderr = Console(stderr=True)

IndexOption = Annotated[
    str | None,
    typer.Option(
        "--index",
        metavar="URL",
        envvar=INDEX_URL_ENV,
        show_envvar=True,
        help="the index's simple API URL (default: PyPI)",
    ),
]


def fail(exc: EnvhubError) -> typer.Exit:
    """One line on stderr for ``exc``; the exit (2) to raise."""
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def _tasks_text(tasks: dict[str, int]) -> str:
    return ", ".join(f"{split} {count}" for split, count in tasks.items()) or "none"


def print_card(card: Card) -> None:
    """A card for a person: the distribution, its envhub-rl range and check, then each
    environment's tasks, client-settable options and tools (``--json`` has it whole)."""
    from envhub.cli._registry_commands import tools_table

    console.print(f"[bold]{escape(card.distribution)}[/bold] {escape(card.version)}: "
                  f"{escape(card.summary)}", soft_wrap=True)  # fmt: skip
    check = "ok" if card.ok else "failed"
    console.print(f"needs envhub-rl{escape(card.requires_envhub or ' (any version)')}; "
                  f"check {check} with envhub-rl {escape(card.checked_with)}")  # fmt: skip
    for env in card.environments:
        console.print(
            f"environment [bold]{escape(env.name)}[/bold] {escape(env.version)}: "
            f"{sum(env.tasks.values())} tasks ({escape(_tasks_text(env.tasks))}), "
            f"check {'ok' if env.check.ok else 'failed'} on {env.check.checked}"
        )
        if env.client_options:
            console.print(f"  options a server's clients may set: {', '.join(env.client_options)}")
        console.print(tools_table(env.tools))


@app.command("publish")
def publish_command(
    path: Annotated[
        Path, typer.Argument(exists=True, file_okay=False, help="the plugin's folder")
    ] = Path("."),
    index: IndexOption = None,
    upload_url: Annotated[
        str | None,
        typer.Option(metavar="URL", help="where to upload (default: from --index)"),
    ] = None,
    repository: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="a .pypirc section to upload to, as twine -r"),
    ] = None,
) -> None:
    """Check a plugin, build its sdist and wheel, put its card in the wheel, upload both.

    The check is envhub check's, on every task, run on the built wheel; a plugin that
    fails it is refused and nothing is uploaded. Credentials are twine's:
    TWINE_USERNAME and TWINE_PASSWORD, or .pypirc.
    """
    from envhub.hub.index import resolve_index_url
    from envhub.hub.publish import publish, upload_url_for

    try:
        if upload_url is None and repository is None:
            upload_url = upload_url_for(resolve_index_url(index))
        published = publish(
            path, upload_url=upload_url, repository=repository,
            step=lambda message: stderr.print(f"{escape(message)} ...", soft_wrap=True),
        )  # fmt: skip
    except EnvhubError as exc:
        raise fail(exc) from None
    card = published.card
    envs = ", ".join(f"{env.name} ({sum(env.tasks.values())} tasks, check ok)"
                     for env in card.environments)  # fmt: skip
    console.print(f"published {card.distribution} {card.version} to "
                  f"{escape(published.uploaded_to)}: {escape(envs)}", soft_wrap=True)  # fmt: skip


@app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="words in a name, summary or tool name")] = "",
    index: IndexOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the cards as JSON")] = False,
) -> None:
    """List the envhub plugins on a package index, read from their cards (nothing is
    installed): name, latest version, environments, tools and task counts."""
    from envhub.hub.index import PackageIndex, resolve_index_url

    cards: list[Card] = []
    try:
        with PackageIndex(resolve_index_url(index)) as hub:
            for project, found in hub.plugin_cards(query):
                if isinstance(found, EnvhubError):
                    typer.echo(f"warning: {project} skipped: {found}", err=True)
                else:
                    cards.append(found)
    except EnvhubError as exc:
        raise fail(exc) from None
    if as_json:
        typer.echo(json.dumps([card.model_dump(mode="json") for card in cards], indent=2))
        return
    if not cards:
        stderr.print(f"no envhub plugin{' matches ' + repr(query) if query else ''} on the index")
        return
    for card in cards:
        console.print(f"[bold]{escape(card.distribution)}[/bold] {escape(card.version)}: "
                      f"{escape(card.summary)}", soft_wrap=True)  # fmt: skip
        for env in card.environments:
            console.print(
                f"  {escape(env.name)}: {sum(env.tasks.values())} tasks "
                f"({escape(_tasks_text(env.tasks))}); tools {escape(', '.join(env.tool_names))}",
                soft_wrap=True,
            )


def _post_install_check(card: Card, limit: int) -> None:
    """``envhub check --limit`` on each environment the plugin registers, in a fresh
    interpreter (this one listed the installed plugins before pip added this one)."""
    for env in card.environments:
        command = [sys.executable, "-m", "envhub.cli", "check", env.name, "--limit", str(limit)]
        if subprocess.run(command).returncode != 0:
            typer.echo(
                f"error: {card.distribution} {card.version} is installed, but "
                f"envhub check {env.name} failed here",
                err=True,
            )
            raise typer.Exit(1)


@app.command("install")
def install_command(
    requirement: Annotated[str, typer.Argument(help="envhub-rl-NAME, or envhub-rl-NAME==VERSION")],
    index: IndexOption = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="allow changes to packages already installed")
    ] = False,
    check_limit: Annotated[
        int,
        typer.Option(min=0, metavar="N", help="tasks envhub check runs afterwards (0: none)"),
    ] = 8,
) -> None:
    """Install a plugin from a package index with pip, then run envhub check on it.

    Refuses a plugin whose envhub-rl range excludes this envhub. Shows what pip would
    change first; upgrading or downgrading a package already installed needs --yes (or a
    yes at the prompt).
    """
    from envhub.hub.index import resolve_index_url
    from envhub.hub.install import parse_requirement, plan_install, run_install

    try:
        name, version = parse_requirement(requirement)
        plan = plan_install(name, version, resolve_index_url(index))
    except EnvhubError as exc:
        raise fail(exc) from None
    card = plan.card
    for change in plan.changes:
        old = f"{change.old} -> " if change.old else ""
        stderr.print(f"pip would {change.kind} {change.name} {old}{change.new}", soft_wrap=True)
    if plan.touches_installed and not yes:
        touched = ", ".join(f"{c.name} {c.old} -> {c.new}" for c in plan.touches_installed)
        if not sys.stdin.isatty():
            typer.echo(f"error: installing {plan.requirement} would change installed "
                       f"packages ({touched}); pass --yes to allow it", err=True)  # fmt: skip
            raise typer.Exit(2)
        if not typer.confirm(f"change installed packages ({touched})?", err=True):
            raise typer.Exit(1)
    envs = ", ".join(env.name for env in card.environments)
    if not plan.changes:
        console.print(f"{card.distribution} {card.version} ({envs}) is already installed")
    else:
        try:
            run_install(plan)
        except EnvhubError as exc:
            raise fail(exc) from None
        console.print(f"installed {card.distribution} {card.version} ({envs})")
    if check_limit:
        _post_install_check(card, check_limit)

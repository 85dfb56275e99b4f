"""Options shared by every command that takes an environment (``--env-arg KEY=VALUE``,
``--sandbox``), and the check of a server command's ``--host``/``--port``."""

from __future__ import annotations

import errno
import json
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from envhub.registry import entry_point_names

__all__ = [
    "EnvArgOption",
    "GcThresholdOption",
    "SandboxBackendOption",
    "env_options",
    "parse_env_args",
    "plugin_choices",
    "require_listenable",
    "warn_tool_gaps",
]


def plugin_choices(group: str) -> str:
    """The names installed in entry-point ``group`` for a ``--help`` text, ``a|b|c`` (read
    from entry-point metadata once, when the command is defined). The group is named, not
    its :class:`~envhub.registry.PluginKind`: the modules declaring the kinds import what
    their plugins are made of (pydantic models, asyncio), which ``--help`` does not need;
    tests/core/test_cli_startup.py holds the names equal."""
    return "|".join(entry_point_names(group))


def require_listenable(host: str, port: int) -> None:
    """Exit 2 (a usage error) with one line on stderr when a server cannot listen on
    ``host:port`` now, before ``serve``/``view`` say where they serve: uvicorn would
    print its own bind error only after that, and exit 3."""
    from envhub._util.net import check_bindable

    try:
        check_bindable(host, port)
    except OSError as exc:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            reason = f"{address} is in use (another server listens there); pass another --port"
        else:
            reason = f"cannot listen on {address}: {exc.strerror or exc}; check --host/--port"
        typer.echo(f"error: {reason}", err=True)
        raise typer.Exit(2) from None


def warn_tool_gaps(gaps: list[str]) -> None:
    """Print :func:`envhub.tools.schema_gaps`' lines on stderr, once with how a ``@tool``
    method fills them: a warning, so stdout stays the command's result."""
    for gap in gaps:
        typer.echo(f"warning: {gap}", err=True)
    if gaps:
        typer.echo(
            "warning: the model sees these tools' schemas as they are; a @tool method takes a "
            "parameter's type from its annotation and its description from the docstring's "
            "Args: section, and its own description from the docstring",
            err=True,
        )


EnvArgOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env-arg",
        help="environment option KEY=VALUE (repeatable); VALUE is parsed as JSON when it can be",
    ),
]


def parse_env_args(pairs: list[str]) -> dict[str, Any]:
    """``["mode=text", "max_items=5"]`` -> ``{"mode": "text", "max_items": 5}``."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--env-arg")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        options[key.strip()] = value
    return options


SandboxBackendOption = Annotated[
    str | None,
    typer.Option(
        "--sandbox",
        help=f"sandbox backend ({plugin_choices('envhub.sandboxes')}, or module:Class) of the "
        "environments that declare a `sandbox` option, as --env-arg sandbox=... would set "
        "it (default: each environment's own, see $ENVHUB_SANDBOX)",
    ),
]


def env_options(
    envs: Sequence[str], env_args: list[str] | None, sandbox: str | None
) -> list[dict[str, Any]]:
    """The options of each of ``envs``: the ``--env-arg`` pairs, plus ``sandbox=<--sandbox>``
    for each environment whose class declares a ``sandbox`` option.

    ``--sandbox`` is an environment option like any other and never writes
    ``ENVHUB_SANDBOX`` (the operator's default, which environments read through
    ``envhub.sandboxes.resolve_backend``). It is refused when it names no backend, when
    ``--env-arg sandbox=`` sets the option too, and when none of ``envs`` declares it
    (it would change nothing). Environment classes are loaded only for ``--sandbox``.
    """
    options = parse_env_args(env_args or [])
    if sandbox is None:
        return [dict(options) for _ in envs]
    from envhub.environment import option_names
    from envhub.errors import EnvhubError
    from envhub.registry import load_environment_class
    from envhub.sandboxes import resolve_backend

    try:
        backend = resolve_backend(sandbox)
    except EnvhubError as exc:
        raise typer.BadParameter(str(exc), param_hint="--sandbox") from None
    if "sandbox" in options:
        raise typer.BadParameter(
            "give the backend once: --sandbox or --env-arg sandbox=...", param_hint="--sandbox"
        )
    try:
        takes = ["sandbox" in option_names(load_environment_class(env)) for env in envs]
    except EnvhubError as exc:
        raise typer.BadParameter(str(exc), param_hint="ENV") from None
    if not any(takes):
        raise typer.BadParameter(
            f"{', '.join(envs)} declare{'s' if len(envs) == 1 else ''} no sandbox option "
            "(environments that run model code, such as swe and sql, do)",
            param_hint="--sandbox",
        )
    return [{**options, "sandbox": backend} if take else dict(options) for take in takes]


GcThresholdOption = Annotated[
    int,
    typer.Option(
        help="allocations between young garbage collections, after freezing startup "
        "objects (see envhub._util.gc_tuning); 0 keeps Python's defaults",
    ),
]

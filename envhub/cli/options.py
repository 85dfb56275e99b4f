"""Options shared by every command that takes an environment (``--env-arg KEY=VALUE``)."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer

__all__ = [
    "EnvArgOption",
    "GcThresholdOption",
    "SandboxBackendOption",
    "parse_env_args",
    "use_sandbox_backend",
]

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
        help="sandbox backend for environments that run code: local|bwrap|docker "
        "(default: $ENVHUB_SANDBOX, else local)",
    ),
]


def use_sandbox_backend(backend: str | None) -> None:
    """Make ``--sandbox`` the process-wide default that ``resolve_backend`` reads.

    Environments resolve their backend through ``envhub.sandboxes.resolve_backend``,
    whose configuration source is ``ENVHUB_SANDBOX``; setting it here means one flag
    reaches every environment a command creates, in-process or hosted.
    """
    if backend is None:
        return
    from envhub.sandboxes import BACKENDS

    if backend not in BACKENDS:
        raise typer.BadParameter(
            f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}",
            param_hint="--sandbox",
        )
    os.environ["ENVHUB_SANDBOX"] = backend

GcThresholdOption = Annotated[
    int,
    typer.Option(
        help="allocations between young garbage collections, after freezing startup "
        "objects (see envhub.gc_tuning); 0 keeps Python's defaults",
    ),
]

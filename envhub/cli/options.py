"""Options shared by every command that takes an environment (``--env-arg KEY=VALUE``)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

__all__ = ["EnvArgOption", "parse_env_args"]

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

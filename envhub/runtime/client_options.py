"""Client-settable options: the few environment options a server's clients may choose.

The operator who starts ``envhub serve`` is trusted and passes any constructor option
with ``--env-arg``. An HTTP or WebSocket client is not trusted with the server's machine:
in ``POST /v1/sessions`` it may set only the options its environment class declares in
:attr:`envhub.Environment.client_options`, each checked against its declared type and
bounds before anything is built. Sandbox backends, paths, caches, limits and timeouts are
operator options. A class declares nothing by default, so a new environment is closed to
clients until its author opens an option on purpose.

A declaration maps option names to pydantic-validatable types::

    client_options = {
        "num_tasks": Annotated[int, Field(ge=1, le=10_000)],
        "comparator": Literal["bird", "spider", "strict"],
    }
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from envhub.environment import Environment, option_names
from envhub.errors import InvalidRequest

__all__ = ["client_option_schemas", "validate_client_options"]

_NAME_SHOWN = 64  # characters of a refused option name quoted back (names are client text)


@functools.cache
def _adapters(cls: type[Environment]) -> dict[str, TypeAdapter[Any]]:
    """One validator per declared option; a declaration naming an option the constructor
    does not take is a bug in the environment, reported when the class is first used."""
    accepted = set(option_names(cls))
    unknown = sorted(set(cls.client_options) - accepted)
    if unknown:
        raise TypeError(
            f"{cls.__name__}.client_options declares {', '.join(unknown)}, "
            "which its constructor does not accept"
        )
    return {name: TypeAdapter(kind) for name, kind in cls.client_options.items()}


def client_option_schemas(cls: type[Environment]) -> dict[str, dict[str, Any]]:
    """The JSON schema (type, bounds, choices) of each client-settable option."""
    adapters = _adapters(cls)  # type: ignore[arg-type]  # mypy#11470: a class is Hashable
    return {name: adapter.json_schema() for name, adapter in adapters.items()}


def validate_client_options(
    cls: type[Environment], options: Mapping[str, Any], *, env: str
) -> dict[str, Any]:
    """``options`` as validated values, or :class:`InvalidRequest` naming the first option
    that is unknown, operator-only or out of its bounds.

    Nothing is built or opened before this check, so a refusal reveals nothing about the
    server's files.
    """
    adapters = _adapters(cls)  # type: ignore[arg-type]  # mypy#11470: a class is Hashable
    settable = ", ".join(sorted(adapters)) or "none"
    validated: dict[str, Any] = {}
    for name, value in options.items():
        shown = name if len(name) <= _NAME_SHOWN else name[:_NAME_SHOWN] + "..."
        adapter = adapters.get(name)
        if adapter is None:
            if name in option_names(cls):
                raise InvalidRequest(
                    f"option {shown!r} of {env} is set by the server's operator "
                    f"(envhub serve --env-arg), not by clients; clients may set: {settable}"
                )
            raise InvalidRequest(f"unknown option {shown!r} for {env}; clients may set: {settable}")
        try:
            validated[name] = adapter.validate_python(value)
        except ValidationError as exc:
            reason = exc.errors()[0].get("msg", "invalid value")
            raise InvalidRequest(f"option {shown!r} of {env}: {reason}") from None
    return validated

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

The operator's options are checked against the constructor's annotations when the
constructor fails on them (:func:`validate_operator_options`), so ``--env-arg
num_tasks=abc`` is a one-line refusal naming the option, the value and the expected type
rather than a traceback from inside the environment.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, PydanticSchemaGenerationError, TypeAdapter, ValidationError

from envhub.environment import Environment, option_names
from envhub.errors import InvalidRequest

__all__ = ["client_option_schemas", "validate_client_options", "validate_operator_options"]

_NAME_SHOWN = 64  # characters of a refused option name quoted back (names are client text)
_VALUE_SHOWN = 80  # characters of a refused operator value quoted back


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


@functools.cache
def _constructor_adapters(cls: type[Environment]) -> dict[str, tuple[str, TypeAdapter[Any]]]:
    """A validator and a readable type name for each annotated constructor option.

    Options whose annotation cannot be resolved (a name imported only for type checking)
    or has no schema (``Any``-like or arbitrary classes are checked with ``isinstance``)
    stay as the constructor takes them: the check refuses only what the annotation rules
    out.
    """
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):
        return {}
    config = ConfigDict(arbitrary_types_allowed=True)
    adapters: dict[str, tuple[str, TypeAdapter[Any]]] = {}
    for name in option_names(cls):
        kind = hints.get(name)
        if kind is None or kind is Any:
            continue
        shown = getattr(kind, "__name__", None) if isinstance(kind, type) else None
        try:
            adapter = TypeAdapter(kind, config=config)
        except (PydanticSchemaGenerationError, TypeError):
            continue
        adapters[name] = (shown or str(kind).replace("typing.", ""), adapter)
    return adapters


def validate_operator_options(
    cls: type[Environment], options: Mapping[str, Any], *, env: str
) -> None:
    """:class:`InvalidRequest` naming the first of the operator's ``options`` (``--env-arg``)
    that its constructor's annotation refuses: ``option 'num_tasks' of calc: expected int,
    got 'abc'``.

    The values are only checked, not converted: the constructor still receives what the
    operator gave (a JSON-parsed ``--env-arg`` value), as it did before this check.
    """
    adapters = _constructor_adapters(cls)  # type: ignore[arg-type]  # mypy#11470
    for name, value in options.items():
        if name not in adapters:
            continue
        shown, adapter = adapters[name]
        try:
            adapter.validate_python(value)
        except ValidationError:
            got = repr(value)
            got = got if len(got) <= _VALUE_SHOWN else got[:_VALUE_SHOWN] + "..."
            raise InvalidRequest(f"option {name!r} of {env}: expected {shown}, got {got}") from None

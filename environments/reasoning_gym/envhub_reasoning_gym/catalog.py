"""Which Reasoning Gym datasets exist, which a default task set holds, and how their
configurations are checked.

Reasoning Gym registers its generators in ``reasoning_gym.factory.DATASETS`` (name ->
dataset class, config dataclass). Every one of them can be selected by name. The default
selection is every dataset whose gold answer scores 1 under its own ``score_answer``;
the others are listed in :data:`NOT_CHECKABLE` with the reason, so ``envhub check``
holds on the default set and nothing is dropped silently.

Configurations come from two kinds of caller. The operator (trusted) may set any field
of a dataset's config dataclass. A server's client may set only the fields the dataset's
own curriculum varies (``reasoning_gym.factory.CURRICULA``), within the values its
levels span: generating a task costs the server CPU and memory, and the curriculum
bounds are Reasoning Gym's own notion of a sane difficulty range.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from collections.abc import Mapping
from typing import Any

from envhub.errors import InvalidRequest

__all__ = [
    "NOT_CHECKABLE",
    "all_datasets",
    "check_client_config",
    "default_datasets",
    "parse_config",
    "parse_datasets",
]

#: datasets left out of the default set, with the reason; each can still be selected
NOT_CHECKABLE: dict[str, str] = {
    "composite": "a mix of other datasets: it needs a `datasets` config and has no default",
    "boxnet": "no oracle answer (entry answer is None): score_answer simulates any plan",
    "graph_color": "no oracle answer (entry answer is None): score_answer checks any coloring",
    "propositional_logic": "no oracle answer (entry answer is None): score_answer checks "
    "any valid conclusion",
    "rubiks_cube": "no oracle answer (entry answer is None): score_answer replays any "
    "move sequence",
    "rush_hour": "no oracle answer (entry answer is None): score_answer replays any move sequence",
}

#: config fields set by the task set's own options, never through ``config``
_RESERVED_FIELDS = ("seed", "size")


def _registry() -> dict[str, tuple[type, type]]:
    from reasoning_gym.factory import DATASETS

    return DATASETS


def all_datasets() -> list[str]:
    """Every dataset Reasoning Gym registers, sorted."""
    return sorted(_registry())


def default_datasets() -> list[str]:
    """The datasets of a task set that names none: all but :data:`NOT_CHECKABLE`."""
    return [name for name in all_datasets() if name not in NOT_CHECKABLE]


def parse_datasets(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """``"a,b"`` or ``["a", "b"]`` -> known names in the given order, without repeats;
    ``None``, ``""`` or ``"default"`` -> :func:`default_datasets`; ``"all"`` -> every one."""
    if value is None:
        return default_datasets()
    if isinstance(value, str):
        if value.strip() in ("", "default"):
            return default_datasets()
        if value.strip() == "all":
            return all_datasets()
        names = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        names = [v.strip() for v in value]
    else:
        raise InvalidRequest("datasets must be a comma-separated string or a list of names")
    if not names:
        raise InvalidRequest("datasets names no dataset")
    known = _registry()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidRequest(
            f"unknown Reasoning Gym dataset(s): {', '.join(repr(n[:64]) for n in unknown[:5])}; "
            "`envhub info reasoning_gym` lists them (or see reasoning_gym.factory.DATASETS)"
        )
    return list(dict.fromkeys(names))


def parse_config(value: str | Mapping[str, Any] | None, datasets: list[str]) -> dict[str, dict]:
    """The per-dataset config overrides, ``{"dataset": {"field": value}}`` (a JSON string
    is accepted for ``--env-arg``), checked against each config dataclass and its own
    ``validate()``; anything else is an :class:`InvalidRequest` naming the problem."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"config is not JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise InvalidRequest('config must map dataset names to field dicts: {"name": {...}}')
    parsed: dict[str, dict] = {}
    for name, fields in value.items():
        if name not in datasets:
            raise InvalidRequest(
                f"config names dataset {str(name)[:64]!r}, which is not among the selected datasets"
            )
        if not isinstance(fields, Mapping):
            raise InvalidRequest(f"config[{name!r}] must be an object of config fields")
        config_cls = _registry()[name][1]
        allowed = {f.name for f in dataclasses.fields(config_cls)} - set(_RESERVED_FIELDS)
        for key in fields:
            if key in _RESERVED_FIELDS:
                raise InvalidRequest(f"config[{name!r}] sets {key!r}: use the {key} option")
            if key not in allowed:
                raise InvalidRequest(
                    f"config[{name!r}] has no field {str(key)[:64]!r}; "
                    f"fields: {', '.join(sorted(allowed))}"
                )
        try:
            config = config_cls(**fields)
            if hasattr(config, "validate"):
                config.validate()
        except Exception as exc:  # the config's own checks: assertions, type errors
            reason = str(exc) or type(exc).__name__
            raise InvalidRequest(f"config[{name!r}] is invalid: {reason[:300]}") from None
        parsed[name] = dict(fields)
    return parsed


def _curriculum_bounds(name: str) -> dict[str, list[Any]]:
    """Config field -> the levels the dataset's curriculum gives it (none: no curriculum)."""
    from reasoning_gym.factory import CURRICULA

    if name not in CURRICULA:
        return {}
    bounds: dict[str, list[Any]] = {}
    for attribute in CURRICULA[name]()._attributes.values():
        for field in ("field_name", "lower_field_name", "upper_field_name"):
            field_name = getattr(attribute, field, None)
            if field_name:
                bounds[field_name] = list(attribute.levels)
    return bounds


def _within(value: Any, levels: list[Any]) -> bool:
    numeric = [v for v in levels if isinstance(v, numbers.Real) and not isinstance(v, bool)]
    if numeric and len(numeric) == len(levels):
        return (
            isinstance(value, numbers.Real)
            and not isinstance(value, bool)
            and min(numeric) <= value <= max(numeric)
        )
    return value in levels


def check_client_config(value: Any) -> Any:
    """A client's ``config``: only curriculum fields, each within its curriculum's levels.

    Names and types are checked again by :func:`parse_config` when the environment is
    built; this adds the bounds an untrusted caller must stay within."""
    if not isinstance(value, Mapping):
        raise ValueError('config must map dataset names to field dicts: {"name": {...}}')
    known = _registry()
    for name, fields in value.items():
        if name not in known:
            raise ValueError(f"unknown Reasoning Gym dataset {str(name)[:64]!r}")
        if not isinstance(fields, Mapping):
            raise ValueError(f"config[{name!r}] must be an object of config fields")
        bounds = _curriculum_bounds(name)
        for key, field_value in fields.items():
            levels = bounds.get(key)
            if levels is None:
                settable = ", ".join(sorted(bounds)) or "none"
                raise ValueError(
                    f"config[{name!r}][{str(key)[:64]!r}] is not settable by clients "
                    f"(its curriculum fields: {settable})"
                )
            if not _within(field_value, levels):
                raise ValueError(
                    f"config[{name!r}][{key!r}] = {str(field_value)[:64]} is outside the "
                    f"curriculum's levels {levels}"
                )
    return value

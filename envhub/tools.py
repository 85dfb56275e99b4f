"""Tools: the ``@tool`` marker, OpenAI function schemas, and argument validation.

``@tool`` only tags a method (like pluggy's markers); :func:`collect_tools` reads the
tags off an environment class and builds one :class:`ToolSpec` per tool. The JSON
schema and the argument validator come from the same pydantic model, derived from
the signature's type hints and the docstring's ``Args:`` section, so the schema the
model sees and the validation the call goes through can never disagree. Before either,
:func:`parse_arguments` reads the model's arguments (:mod:`envhub.model_text`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar, get_type_hints

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from envhub.errors import ToolArgumentError
from envhub.model_text import ModelTextError, read_arguments

__all__ = ["ToolSpec", "collect_tools", "parse_arguments", "schema_gaps", "tool"]

_MARK = "__envhub_tool__"
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ToolOptions:
    """What ``@tool(...)`` recorded on a function."""

    terminal: bool = False
    timeout: float | None = None
    name: str | None = None


def tool(
    fn: F | None = None,
    *,
    terminal: bool = False,
    timeout: float | None = None,
    name: str | None = None,
) -> Any:
    """Mark an environment method as a tool the model may call.

    ``terminal=True`` ends the episode after the call (e.g. ``submit``); ``timeout``
    overrides the session's per-call timeout for this tool. Usable bare or called.
    """

    def mark(f: F) -> F:
        setattr(f, _MARK, ToolOptions(terminal=terminal, timeout=timeout, name=name))
        return f

    return mark(fn) if fn is not None else mark


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, OpenAI schema, argument model and options."""

    name: str
    description: str
    attr: str
    args_model: type[BaseModel]
    terminal: bool
    timeout: float | None
    is_async: bool

    @cached_property
    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry (``{"type": "function", "function": {...}}``)."""
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        params.setdefault("properties", {})
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check arguments against the signature; raise a model-readable error."""
        try:
            parsed = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ToolArgumentError(f"invalid arguments for {self.name}: {problems}") from None
        return {field: getattr(parsed, field) for field in type(parsed).model_fields}


def parse_arguments(tool_name: str, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as a JSON object (blank text is ``{}``), read by
    :func:`envhub.model_text.read_arguments`. Anything else (invalid JSON, not an object,
    nested too deeply, a number too long, text that is not valid Unicode) is a
    :class:`ToolArgumentError` the model reads."""
    if isinstance(arguments, str):
        arguments = arguments.strip() or "{}"
    try:
        parsed = read_arguments(arguments)
    except ModelTextError as exc:
        raise ToolArgumentError(f"arguments of {tool_name} {exc}") from None
    if not isinstance(parsed, Mapping):
        raise ToolArgumentError(f"arguments of {tool_name} must be a JSON object")
    return dict(parsed)


def _spec_from_function(attr: str, fn: Callable[..., Any], options: ToolOptions) -> ToolSpec:
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    arg_docs = {p.arg_name: p.description or "" for p in doc.params}
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if pname == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(pname, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, Field(default, description=arg_docs.get(pname) or None))
    name = options.name or fn.__name__
    description = "\n\n".join(
        part for part in (doc.short_description, doc.long_description) if part
    )
    model = create_model(f"{name}_arguments", __base__=_ArgsBase, **fields)
    return ToolSpec(
        name=name,
        description=description or name,
        attr=attr,
        args_model=model,
        terminal=options.terminal,
        timeout=options.timeout,
        is_async=inspect.iscoroutinefunction(fn),
    )


# JSON-schema keys that constrain a value's type; a property with none of them accepts anything.
_TYPED = ("type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const")


def schema_gaps(tools: Iterable[Mapping[str, Any]]) -> list[str]:
    """What these OpenAI tool schemas leave the model to guess: one line per tool that has
    a gap, e.g. ``tool 'peek': no description; no type for key; no description for key``.

    ``@tool`` builds a schema from whatever the method has, so a parameter without a type
    hint becomes ``{}`` (any JSON value), one missing from the docstring's ``Args:`` has no
    description, and a method without a docstring is described by its own name. Each is
    legal, so nothing fails; ``envhub check`` and ``envhub info`` print these lines so the
    author sees them. Reads schemas, not methods, so a server's environment is checked
    the same way as an in-process one."""
    gaps: list[str] = []
    for entry in tools:
        function = entry.get("function", {})
        name = function.get("name", "?")
        properties = function.get("parameters", {}).get("properties", {})
        untyped = [p for p, schema in properties.items() if not any(k in schema for k in _TYPED)]
        undescribed = [p for p, schema in properties.items() if not schema.get("description")]
        problems = [
            *(["no description"] if function.get("description", name) == name else []),
            *([f"no type for {', '.join(untyped)}"] if untyped else []),
            *([f"no description for {', '.join(undescribed)}"] if undescribed else []),
        ]
        if problems:
            gaps.append(f"tool {name!r}: " + "; ".join(problems))
    return gaps


def collect_tools(cls: type) -> dict[str, ToolSpec]:
    """All ``@tool`` methods of ``cls`` (including inherited ones), keyed by tool name."""
    specs: dict[str, ToolSpec] = {}
    for attr in dir(cls):
        fn = getattr(cls, attr, None)
        options = getattr(fn, _MARK, None)
        if isinstance(options, ToolOptions) and callable(fn):
            spec = _spec_from_function(attr, fn, options)
            specs[spec.name] = spec
    return specs

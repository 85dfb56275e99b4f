"""Text a model wrote, parsed and bounded one way wherever it enters envhub.

A model's tool-call arguments are hostile input. Three things in them break the code
that reads them next (``json``'s encoder and decoder, pydantic, trainers' chat templates,
the trajectory viewer) even when the JSON is valid:

- **nesting**: recursive parsers and encoders raise ``RecursionError`` near 1,000 levels
  (orjson and pydantic stop at 255), so arguments nested deeper than
  :data:`MAX_ARGUMENT_DEPTH` levels are refused, far beyond any tool's schema;
- **numbers**: Python refuses to read or write an integer of more than
  ``sys.get_int_max_str_digits()`` (4,300) digits, raising ``ValueError``;
- **text**: JSON's ``"\\ud800"`` escape decodes to an unpaired surrogate, which no UTF-8
  stream can carry: every HTTP, WebSocket or stdio answer quoting it fails.

:func:`loads_json` reads any JSON a model wrote (a tool call, a gymnasium action) with
every failure a :class:`ModelTextError`; :func:`read_arguments` (text or an object) also
refuses the three above in arguments. The message is one the model can read (the
session answers it with an error observation: the episode goes on and is scored, never
masked). :func:`bounded_arguments` cuts arguments built in-process (a policy's dict) to
one level past the limit, so they can still be encoded for any transport and are
refused the same way on each. :func:`valid_text` makes free text (a final answer, a tool
name, an observation) encodable as UTF-8.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "ModelTextError",
    "bounded_arguments",
    "loads_json",
    "read_arguments",
    "valid_text",
]

MAX_ARGUMENT_DEPTH = 100
"""Arrays and objects nested deeper than this in tool-call arguments are refused."""

_TOO_DEEP = f"are nested too deeply (at most {MAX_ARGUMENT_DEPTH} levels of arrays and objects)"
_NOT_TEXT = "contain a string that is not valid Unicode (an unpaired surrogate such as \\ud800)"


class ModelTextError(ValueError):
    """Why JSON a model wrote cannot be taken, worded to follow what it is ("the arguments
    of f" + ``" are nested too deeply (...)"``)."""


def loads_json(text: str) -> Any:
    """``json.loads(text)``, with every failure a :class:`ModelTextError`: invalid JSON,
    nesting past the decoder's recursion limit, an integer too long to read."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # some decoder messages end in " at" ("Unterminated string starting at"): one "at"
        reason = exc.msg.removesuffix(" at")
        raise ModelTextError(f"are not valid JSON ({reason} at position {exc.pos})") from None
    except RecursionError:
        raise ModelTextError(_TOO_DEEP) from None
    except ValueError:  # int("9" * 5000): the only other ValueError json.loads raises
        raise ModelTextError(_too_many_digits()) from None


def read_arguments(arguments: str | Mapping[str, Any]) -> Any:
    """A call's arguments as a value: the model's JSON text read by :func:`loads_json`, or
    the object a caller passed (an in-process policy, the MCP door), each held to
    :func:`_argument_problem`. Every failure is a :class:`ModelTextError`."""
    value = loads_json(arguments) if isinstance(arguments, str) else arguments
    problem = _argument_problem(value)
    if problem is not None:
        raise ModelTextError(problem)
    return value


def _argument_problem(value: Any) -> str | None:
    """What makes parsed arguments unfit to pass on (nesting past
    :data:`MAX_ARGUMENT_DEPTH`, an unpaired surrogate in a string or key, an integer too
    long to write as JSON), worded as :class:`ModelTextError`'s, or ``None``. Walks the
    value without recursion."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_ARGUMENT_DEPTH:
                return _TOO_DEEP
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
        elif isinstance(item, str) and not _is_valid_text(item):
            return _NOT_TEXT
        elif isinstance(item, int) and not _writable_int(item):
            return _too_many_digits()
    return None


def bounded_arguments(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` itself when it is within :data:`MAX_ARGUMENT_DEPTH`; else a copy cut one
    level past it (the containers there emptied), which every JSON encoder can write and
    :func:`_argument_problem` refuses just as it refuses the original."""
    if _depth_within(value, MAX_ARGUMENT_DEPTH + 1):
        return value
    root: dict[str, Any] = {}
    pending: list[tuple[Any, Any, int]] = [(value, root, 1)]
    while pending:
        source, copy, depth = pending.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in items:
            if isinstance(child, dict | list):
                child_copy: Any = {} if isinstance(child, dict) else []
                if depth < MAX_ARGUMENT_DEPTH:
                    pending.append((child, child_copy, depth + 1))
            else:
                child_copy = child
            if isinstance(copy, dict):
                copy[key] = child_copy
            else:
                copy.append(child_copy)
    return root


def valid_text(text: str) -> str:
    """``text`` with each unpaired surrogate replaced by U+FFFD (a pair of surrogates
    becomes the character they encode), so it can be sent as UTF-8."""
    if _is_valid_text(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _is_valid_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _writable_int(number: int) -> bool:
    """Whether ``str(number)`` works (Python's limit on integer digits)."""
    limit = sys.get_int_max_str_digits()
    # 3.33 bits per digit: a number under limit * 3.3 bits has fewer digits than the limit
    if limit == 0 or number.bit_length() < limit * 3.3:
        return True
    try:
        str(number)
    except ValueError:
        return False
    return True


def _depth_within(value: Any, limit: int) -> bool:
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > limit:
            return False
        children = item.values() if isinstance(item, dict) else item
        pending.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return True


def _too_many_digits() -> str:
    return f"contain a number with more than {sys.get_int_max_str_digits()} digits"

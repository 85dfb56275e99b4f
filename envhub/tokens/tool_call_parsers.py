"""Tool calls out of raw model text, by named parser.

Policies that sample text themselves (token-in/token-out, :mod:`envhub.policies.tito`) and
trainers whose generators hand over text (SkyRL and verl agent loops, which give the
environment the decoded completion) must find the tool calls in that text. Each model
family writes them its own way, so parsers are registered by name in the
``envhub.tool_call_parsers`` entry-point group, envhub's own as a plugin's are (looked up
with :func:`tool_parser`; a parser is a callable ``(text) -> ParsedAction``):

- ``hermes`` (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), which
  Qwen2.5/3, SmolLM3, Hermes and most open tool-calling templates emit;
- ``llama3_json`` (a bare ``{"name": ..., "parameters": {...}}`` object, optionally after
  ``<|python_tag|>``, several separated by ``;``), Llama 3.1-3.3's JSON tool calling.

A call that is not JSON envhub takes (invalid, nested too deeply, a number too long to
read: :func:`envhub.model_text.read_arguments`) still becomes a
:class:`~envhub.types.ToolCall` (the name recovered by a regex, the raw text as
arguments) so that the envhub session, the one place calls are validated, answers it
with a model-readable error observation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from envhub.model_text import ModelTextError, read_arguments
from envhub.registry import PluginKind, load_plugin
from envhub.types import ToolCall

__all__ = [
    "TOOL_CALL_PARSERS",
    "ParsedAction",
    "ToolParser",
    "parse_hermes",
    "parse_llama3_json",
    "tool_parser",
]

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_PYTHON_TAG = "<|python_tag|>"


@dataclass(frozen=True, slots=True)
class ParsedAction:
    """The text outside tool-call blocks (``None`` when blank) and the calls, in order."""

    content: str | None
    tool_calls: list[ToolCall]


ToolParser = Callable[[str], ParsedAction]


def parse_hermes(text: str, *, id_prefix: str = "call") -> ParsedAction:
    """Parse hermes-style ``<tool_call>`` blocks (an unterminated last block counts)."""
    calls = [
        _call(match.group(1), f"{id_prefix}_{index}")
        for index, match in enumerate(_BLOCK.finditer(text))
    ]
    content = _BLOCK.sub("", text).strip() if calls else text.strip()
    return ParsedAction(content=content or None, tool_calls=calls)


def parse_llama3_json(text: str, *, id_prefix: str = "call") -> ParsedAction:
    """Parse Llama 3 JSON tool calls: the whole answer is one or more ``{"name": ...,
    "parameters": ...}`` objects (``;``-separated), optionally after ``<|python_tag|>``.
    An answer that does not start with ``{`` is plain text; one that does but is not a
    JSON object becomes a malformed call (the session answers it with an error)."""
    body = text.strip()
    if body.startswith(_PYTHON_TAG):
        body = body[len(_PYTHON_TAG) :].lstrip()
    if not body.startswith("{"):
        return ParsedAction(content=text.strip() or None, tool_calls=[])
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    position = 0
    while position < len(body):
        call_id = f"{id_prefix}_{len(calls)}"
        try:
            _, end = decoder.raw_decode(body, position)
        except (ValueError, RecursionError):  # invalid JSON, too deep, too many digits
            calls.append(_call(body[position:], call_id))  # the rest is one bad call
            break
        calls.append(_call(body[position:end], call_id))
        position = end
        while position < len(body) and body[position] in "; \t\r\n":
            position += 1
    return ParsedAction(content=None, tool_calls=calls)


def _call(raw: str, call_id: str) -> ToolCall:
    """One call from the JSON text of ``{"name": ..., "arguments" | "parameters": ...}``;
    text that is not such an object is kept verbatim as the arguments."""
    try:
        data = read_arguments(raw)
    except ModelTextError:
        name = _NAME.search(raw)
        return ToolCall(id=call_id, name=name.group(1) if name else "", arguments=raw)
    if not isinstance(data, dict):
        return ToolCall(id=call_id, name="", arguments=raw)
    arguments = data.get("arguments", data.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return ToolCall(id=call_id, name=str(data.get("name") or ""), arguments=arguments)


TOOL_CALL_PARSERS: PluginKind[ToolParser] = PluginKind("envhub.tool_call_parsers", "tool parser")
"""The ``envhub.tool_call_parsers`` entry-point group: a parser by ``--tool-parser`` name."""


def tool_parser(name: str) -> ToolParser:
    """The parser registered as ``name`` (``hermes``, ``llama3_json``, a plugin's) or named
    ``module:function``; an unknown name is an :class:`InvalidRequest` listing the
    installed ones."""
    return load_plugin(TOOL_CALL_PARSERS, name)

"""Tool calls out of raw model text, for trainers whose generators hand over text.

SkyRL and verl agent loops give the environment the decoded completion, not an OpenAI
message, so the tool calls must be parsed from the text. The default format is hermes
(``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), which Qwen2.5/3,
SmolLM3, Hermes and most open tool-calling templates emit.

A block that is not valid JSON still becomes a :class:`~envhub.types.ToolCall` (the name
recovered by a regex, the raw text as arguments) so that the envhub session, the one
place calls are validated, answers it with a model-readable error observation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from envhub.types import ToolCall

__all__ = ["ParsedAction", "ToolParser", "parse_hermes"]

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')


@dataclass(frozen=True, slots=True)
class ParsedAction:
    """The text outside tool-call blocks (``None`` when blank) and the calls, in order."""

    content: str | None
    tool_calls: list[ToolCall]


ToolParser = Callable[[str], ParsedAction]


def parse_hermes(text: str, *, id_prefix: str = "call") -> ParsedAction:
    """Parse hermes-style ``<tool_call>`` blocks (an unterminated last block counts)."""
    calls: list[ToolCall] = []
    for index, match in enumerate(_BLOCK.finditer(text)):
        raw = match.group(1)
        call_id = f"{id_prefix}_{index}"
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            name = _NAME.search(raw)
            calls.append(ToolCall(id=call_id, name=name.group(1) if name else "", arguments=raw))
            continue
        if not isinstance(data, dict):
            calls.append(ToolCall(id=call_id, name="", arguments=raw))
            continue
        arguments = data.get("arguments", data.get("parameters", {}))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append(ToolCall(id=call_id, name=str(data.get("name") or ""), arguments=arguments))
    content = _BLOCK.sub("", text).strip() if calls else text.strip()
    return ParsedAction(content=content or None, tool_calls=calls)

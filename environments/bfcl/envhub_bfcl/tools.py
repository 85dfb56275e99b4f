"""BFCL function docs as envhub tools: the schema is what BFCL sends an OpenAI-style FC
model (its own ``convert_to_tool``: dots in names become underscores, BFCL's types become
JSON-schema types), and every call is forwarded to the environment's ``call_function``.

Arguments are not type-checked before the call: BFCL's own inference executes whatever
the model sent, so a backend that rejects a wrong type answers with its own error.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from envhub import ToolSpec
from envhub_bfcl.categories import entries

__all__ = ["BfclTool", "entry_tools", "tools_for"]

#: the environment method every BFCL tool is dispatched to, as ``(tool=, arguments=)``
FORWARD_ATTR = "call_function"


class ForwardedCall(BaseModel):
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class BfclTool(ToolSpec):
    """One BFCL function as the model sees it (``function`` is the converted doc)."""

    function: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": copy.deepcopy(self.function)}

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"tool": self.name, "arguments": arguments}


def tools_for(docs: list[dict[str, Any]]) -> dict[str, BfclTool]:
    """The tools of a list of BFCL function docs, keyed by the name the model calls."""
    from bfcl_eval.constants.enums import ModelStyle
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.model_handler.utils import convert_to_tool

    converted = [
        tool["function"]
        for tool in convert_to_tool(docs, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)
    ]
    return {
        fn["name"]: BfclTool(
            name=fn["name"],
            description=fn.get("description") or fn["name"],
            attr=FORWARD_ATTR,
            args_model=ForwardedCall,
            terminal=False,
            timeout=None,
            is_async=True,
            function=fn,
        )
        for fn in converted
    }


@functools.lru_cache(maxsize=8192)
def entry_tools(category: str, entry_id: str, turn: int = 0) -> Mapping[str, BfclTool]:
    """The tools of BFCL entry ``entry_id`` (at ``turn`` > 0, the functions the entry holds
    out until that turn; empty when none), converted once per process: the conversion
    deep-copies every function doc, and each episode of a group (or a check's reference
    and no-op episodes) would otherwise convert the same docs again. Read-only: a session
    copies what it extends. The cache holds every shipped entry and turn (about 4,300
    entries, a few MB of schemas): with room for 1,024, a check of them all (each entry's
    reference episodes, then its no-op ones) converted every entry twice."""
    entry = entries(category)[entry_id]
    docs = entry["function"] if turn == 0 else entry.get("missed_function", {}).get(str(turn))
    return MappingProxyType(tools_for(docs) if docs else {})

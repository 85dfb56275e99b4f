"""One trajectory as the episode page shows it: chat entries, tool calls with pretty JSON
arguments, tool results (errors and truncations marked) and per-turn tokens.

The record is validated with :class:`envhub.trajectory.Trajectory` here, one episode at
a time; a record that does not validate is still shown, raw, with the validation error.

Tool messages in a trajectory carry no ``is_error`` flag (an observation becomes a plain
``tool`` message); a result is marked as an error when its message says ``is_error``
(other writers may record it) or its content starts with ``Error: ``, the prefix the
session gives every error observation (:meth:`envhub.session.Session._error`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from envhub.trajectory import Trajectory
from envhub.view.tokens import Decoder, TokenCell, token_cells

__all__ = ["ChatEntry", "Conversation", "ToolCallView", "TurnTokens", "conversation"]

_TRUNCATION = re.compile(r"\[truncated \d+ chars\]")
_ERROR_PREFIX = "Error: "


@dataclass(frozen=True)
class ToolCallView:
    id: str
    name: str
    arguments: str  # pretty JSON, or the raw text when it is not JSON
    valid_json: bool


@dataclass(frozen=True)
class ChatEntry:
    role: str
    content: str
    index: int
    tool_calls: list[ToolCallView] = field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    truncated: bool = False
    turn: int | None = None  # the turn whose model call wrote this assistant message


@dataclass(frozen=True)
class TurnTokens:
    turn: int
    cells: list[TokenCell]
    prompt_tokens: int | None
    prefix_ok: bool | None
    latency_s: float
    policy_version: int | None


@dataclass(frozen=True)
class Conversation:
    record: dict[str, Any]
    trajectory: Trajectory | None
    invalid: str | None
    entries: list[ChatEntry]
    tokens: list[TurnTokens]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content, ensure_ascii=False)


def _call(raw: Any) -> ToolCallView:
    call: dict[str, Any] = raw if isinstance(raw, dict) else {}
    nested = call.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else call
    arguments = function.get("arguments", "")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        pretty, valid = json.dumps(parsed, indent=2, ensure_ascii=False), True
    except (json.JSONDecodeError, TypeError):
        pretty, valid = str(arguments), False
    return ToolCallView(str(call.get("id", "")), str(function.get("name", "?")), pretty, valid)


def conversation(record: dict[str, Any], decoder: Decoder) -> Conversation:
    try:
        trajectory: Trajectory | None = Trajectory.model_validate(record)
        invalid = None
    except ValidationError as exc:
        trajectory, invalid = None, str(exc)
    turns = trajectory.turns if trajectory else []
    turn_of = {t.message_index: i for i, t in enumerate(turns)}
    listed = record.get("messages")
    messages: list[Any] = listed if isinstance(listed, list) else []
    names: dict[str, str] = {}
    entries = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        calls = [_call(c) for c in message.get("tool_calls") or []]
        names.update((c.id, c.name) for c in calls)
        content = _text(message.get("content"))
        role = str(message.get("role", "?"))
        call_id = message.get("tool_call_id")
        entries.append(
            ChatEntry(
                role=role,
                content=content,
                index=index,
                tool_calls=calls,
                tool_call_id=call_id,
                tool_name=names.get(call_id) if call_id else None,
                is_error=role == "tool"
                and (message.get("is_error") is True or content.startswith(_ERROR_PREFIX)),
                truncated=bool(_TRUNCATION.search(content)),
                turn=turn_of.get(index),
            )
        )
    tokens = [
        TurnTokens(
            turn=i,
            cells=token_cells(t.completion_token_ids, t.completion_logprobs, decoder),
            prompt_tokens=len(t.prompt_token_ids) if t.prompt_token_ids else None,
            prefix_ok=t.prefix_ok,
            latency_s=t.latency_s,
            policy_version=t.policy_version,
        )
        for i, t in enumerate(turns)
    ]
    return Conversation(record, trajectory, invalid, entries, [t for t in tokens if t.cells])

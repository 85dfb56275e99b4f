"""A trajectory as a line of a BFCL result file (what BFCL's ``eval_runner`` reads).

The result is taken from the recorded conversation, as BFCL's FC handlers record a
model's output: each assistant message is a step, its tool calls a list of
``{name: arguments}`` (its text when it has none). Single-turn: the calls of the
messages before the first message without calls, as one list. Multi-turn: one list of
steps per user turn, a user turn starting at each user message after the first.
"""

from __future__ import annotations

from typing import Any

from envhub.types import ToolCall

__all__ = ["bfcl_result"]


def _step(message: dict[str, Any]) -> list[dict[str, str]] | str:
    calls = [ToolCall.model_validate(c) for c in message.get("tool_calls") or []]
    if not calls:
        return str(message.get("content") or "")
    return [{c.name: c.to_openai()["function"]["arguments"]} for c in calls]


def bfcl_result(messages: list[dict[str, Any]], multi_turn: bool) -> Any:
    """The ``result`` field of a BFCL result-file line for one episode's messages."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), 0)
    if not multi_turn:
        calls: list[dict[str, str]] = []
        for message in messages[first_user:]:
            if message.get("role") != "assistant":
                continue
            step = _step(message)
            if isinstance(step, str):
                break
            calls.extend(step)
        return calls
    turns: list[list[Any]] = []
    previous = "assistant"
    for message in messages[first_user:]:
        role = message.get("role")
        if role == "user" and previous != "user":
            turns.append([])
        if role == "assistant":
            turns[-1].append(_step(message))
        previous = role
    return turns

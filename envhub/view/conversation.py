"""One trajectory as the episode page shows it: chat entries, tool calls with pretty JSON
arguments, tool results (errors and truncations marked), per-turn tokens and the
environment's reward of each turn that has one (:attr:`envhub.trajectory.Turn.reward`).

What the page reads of the record is type-checked (:func:`envhub.view.record.
check_record`, as the index checked it); the record is also validated as a whole
:class:`envhub.trajectory.Trajectory`, and one that does not validate is still shown,
with the validation error. Message content and tool-call arguments may be any JSON a
model or a tool produced, nested as deep as the line's parser allows; they are shown
laid out (:func:`laid_out`) to a fixed depth, so no rendering step recurses through them.

A tool result is an error, and was cut to the output budget, when its message says so
(``is_error``, ``truncated``: :meth:`envhub.types.Observation.to_message`). Only a message
that lacks the flag (a record written before it existed, or another writer's) falls back
to a guess from the text: the ``Error: `` prefix the session gives every error
observation, or the session's ``[truncated N chars]`` marker. A tool may print either, so
the flag, where present, is the truth.

A compacted episode (:class:`envhub.trajectory.Compaction`) shows its whole conversation
with a mark before the first message each new context was followed by: the segment it
starts, the strategy and threshold, how many messages it replaced by how many, the
summary where one was written, and the new context itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from pydantic import ValidationError

from envhub.trajectory import Trajectory, Turn
from envhub.view.record import (
    ViewedCall,
    ViewedMessage,
    ViewedRecord,
    check_record,
    describe,
)
from envhub.view.token_text import Decoder, TokenCell, token_cells

__all__ = [
    "MAX_DEPTH", "ChatEntry", "CompactionView", "Conversation", "JudgeView", "ToolCallView",
    "TurnTokens", "UserView", "conversation", "laid_out", "pretty", "shown",
]  # fmt: skip

MAX_DEPTH: Final = 32  # levels of nested JSON shown; deeper ones are cut
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
    turn_reward: float | None = None  # the environment's reward for that turn, if any


@dataclass(frozen=True)
class TurnTokens:
    turn: int
    cells: list[TokenCell]
    prompt_tokens: int | None
    prefix_ok: bool | None
    latency_s: float
    policy_version: int | None
    reward: float | None = None  # the environment's reward for the turn, if any
    segment: int = 0  # the context segment (a compaction starts the next)


@dataclass(frozen=True)
class CompactionView:
    """Where and how the context was compacted: the mark the page puts before message
    ``message_index`` of the conversation (the first one the new context was followed by)."""

    segment: int  # the segment it starts
    turn: int
    message_index: int
    strategy: str
    trigger: str | None
    replaced: int | None  # messages of the context it replaced
    kept: int  # messages of the new context
    tokens_before: int | None
    summary: str | None
    summary_model: str | None
    context: list[ChatEntry]  # the new context, as the model was fed it


@dataclass(frozen=True)
class JudgeView:
    """One judge's call of ``reward_info["judges"]`` (:mod:`envhub.rewards.judge`), as
    text: the line is written as a hostile record may hold anything there."""

    name: str
    summary: str
    prompt: list[tuple[str, str]]  # (role, text)
    output: str


@dataclass(frozen=True)
class UserView:
    """The simulated user's model calls of ``reward_info["user"]`` (:mod:`envhub.users`),
    as text, whatever a hostile record holds there."""

    summary: str
    calls: list[tuple[str, str]]  # (latency, output)


@dataclass(frozen=True)
class Conversation:
    record: dict[str, Any]
    fields: ViewedRecord
    invalid: str | None
    entries: list[ChatEntry]
    tokens: list[TurnTokens]
    compactions: list[CompactionView] = field(default_factory=list)
    judges: list[JudgeView] = field(default_factory=list)
    user: UserView | None = None


def judge_views(reward_info: Any) -> list[JudgeView]:
    """The judges' calls of a record's ``reward_info``, whatever its shape (nothing for
    a record without them)."""
    judges = reward_info.get("judges") if isinstance(reward_info, dict) else None
    if not isinstance(judges, dict):
        return []
    views = []
    for name, call in judges.items():
        call = call if isinstance(call, dict) else {"output": call}
        summary = " · ".join(
            f"{key} {shown(call[key])}"
            for key in ("kind", "model", "score", "latency_s", "attempts", "cached", "index")
            if key in call
        )
        prompt = call.get("prompt")
        messages = prompt if isinstance(prompt, list) else [] if prompt is None else [prompt]
        views.append(JudgeView(
            name=str(name),
            summary=summary,
            prompt=[(shown(m.get("role", "")), _text(m.get("content"))) if isinstance(m, dict)
                    else ("", shown(m)) for m in messages],
            output=_text(call.get("output")),
        ))  # fmt: skip
    return views


def user_view(reward_info: Any) -> UserView | None:
    """The simulated user's calls of a record's ``reward_info``, whatever its shape
    (``None`` for a record without them)."""
    user = reward_info.get("user") if isinstance(reward_info, dict) else None
    if not isinstance(user, dict):
        return None
    summary = " · ".join(f"{key} {shown(user[key])}" for key in ("model", "turns", "stop")
                         if key in user)  # fmt: skip
    calls = user.get("calls")
    if not isinstance(calls, list):
        calls = []
    return UserView(summary, [
        (shown(c.get("latency_s", "")), _text(c.get("output"))) if isinstance(c, dict)
        else ("", shown(c)) for c in calls
    ])  # fmt: skip


def laid_out(value: Any, depth: int = 0) -> Any:
    """``value`` with what is nested deeper than :data:`MAX_DEPTH` replaced by a marker:
    what the page shows of it (the rest recurses only that deep)."""
    if not isinstance(value, dict | list):
        return value
    if depth >= MAX_DEPTH:
        return f"… nested deeper than {MAX_DEPTH} levels: cut"
    if isinstance(value, list):
        return [laid_out(v, depth + 1) for v in value]
    return {str(k): laid_out(v, depth + 1) for k, v in value.items()}


def pretty(value: Any) -> str:
    """``value`` as pretty JSON, laid out (:func:`laid_out`)."""
    return json.dumps(laid_out(value), indent=2, ensure_ascii=False)


def shown(value: Any) -> str:
    """A value as the page shows it: a string as it is, anything else as pretty JSON."""
    return value if isinstance(value, str) else pretty(value)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(_part(p) for p in content)
    return shown(content)


def _part(part: Any) -> str:
    if not isinstance(part, dict):
        return shown(part)
    return shown(part.get("text", ""))


def _arguments(arguments: Any) -> tuple[str, bool]:
    """Pretty JSON of tool-call arguments and True, or the text as written and False
    when it is not JSON (orjson parses: unlike :mod:`json` it stops at a fixed depth
    instead of exhausting the stack)."""
    if not isinstance(arguments, str):
        return pretty(arguments), True
    try:
        return pretty(orjson.loads(arguments)), True
    except orjson.JSONDecodeError:
        return arguments, False


def _call(call: ViewedCall) -> ToolCallView:
    called = call.called
    pretty, valid = _arguments(called.arguments)
    return ToolCallView(call.id or "", called.name or "?", pretty, valid)


def _result_flags(message: ViewedMessage, content: str) -> tuple[bool, bool]:
    """``is_error`` and ``truncated`` of a tool result as recorded, guessed from the text
    only where the message lacks them (module docstring); other messages have neither."""
    if message.role != "tool":
        return False, False
    is_error, truncated = message.is_error, message.truncated
    if is_error is None:
        is_error = content.startswith(_ERROR_PREFIX)
    if truncated is None:
        truncated = _TRUNCATION.search(content) is not None
    return is_error, truncated


def _validated(record: dict[str, Any]) -> str | None:
    """Why ``record`` is not a :class:`~envhub.trajectory.Trajectory`, or None."""
    try:
        Trajectory.model_validate(record)
    except ValidationError as exc:
        return describe(exc, limit=20)
    return None


def conversation(record: dict[str, Any], decoder: Decoder) -> Conversation:
    """The episode page of ``record`` (raises :class:`~envhub.view.record.BadRecord` for
    one the index would not take)."""
    fields = check_record(record)
    entries = _entries(fields.messages, fields.turns)
    starts = [c.turn for c in fields.compactions or []]
    tokens = [
        TurnTokens(
            turn=i,
            cells=token_cells(t.completion_token_ids, t.completion_logprobs, decoder),
            prompt_tokens=len(t.prompt_token_ids) if t.prompt_token_ids else None,
            prefix_ok=t.prefix_ok,
            latency_s=t.latency_s,
            policy_version=t.policy_version,
            reward=t.reward,
            segment=sum(1 for s in starts if s <= i),
        )
        for i, t in enumerate(fields.turns)
    ]
    compactions = [
        CompactionView(
            segment=k + 1, turn=c.turn, message_index=c.message_index, strategy=c.strategy,
            trigger=c.trigger, replaced=c.replaced_messages, kept=len(c.messages),
            tokens_before=c.tokens_before,
            summary=None if c.summary is None else _text(c.summary.text),
            summary_model=None if c.summary is None else c.summary.model,
            context=_entries(c.messages, []),
        )
        for k, c in enumerate(fields.compactions or [])
    ]  # fmt: skip
    return Conversation(record, fields, _validated(record), entries,
                        [t for t in tokens if t.cells], compactions,
                        judge_views(record.get("reward_info")),
                        user_view(record.get("reward_info")))  # fmt: skip


def _entries(messages: list[ViewedMessage], turns: list[Turn]) -> list[ChatEntry]:
    """The chat entries of ``messages``; ``turns``: the turns whose model calls wrote
    its assistant messages (their rewards shown on them)."""
    turn_of = {t.message_index: i for i, t in enumerate(turns)}
    names: dict[str, str] = {}
    entries = []
    for index, message in enumerate(messages):
        calls = [_call(c) for c in message.tool_calls or []]
        names.update((c.id, c.name) for c in calls)
        content = _text(message.content)
        call_id = message.tool_call_id
        is_error, truncated = _result_flags(message, content)
        entries.append(
            ChatEntry(
                role=message.role,
                content=content,
                index=index,
                tool_calls=calls,
                tool_call_id=call_id,
                tool_name=names.get(call_id) if call_id else None,
                is_error=is_error,
                truncated=truncated,
                turn=turn_of.get(index),
                turn_reward=None if index not in turn_of else turns[turn_of[index]].reward,
            )
        )
    return entries

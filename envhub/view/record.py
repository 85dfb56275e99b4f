"""The fields of a trajectory line that the viewer reads, type-checked in one model.

The index, the charts, the summary, the episode page and the report read these fields
and nothing else of a line, so a line that passes :func:`check_record` cannot break one
of them. A line comes from a rollout but its values from a model, an environment or
another writer, so a line that does not pass is a problem row of the index
(:class:`BadRecord`'s code and a message naming the fields), never a page that fails.

The check is strict (JSON's types, no coercion: ``"0.5"`` is not a reward, ``1`` is not
``true``) and uses the trajectory format's own models where it has them (env, error,
turns, metrics, timings, usage); messages, which the format leaves open, declare only
the fields the viewer reads. Integers must fit an sqlite INTEGER, and a scored episode (not
``masked``) needs a reward: the summary's mean and pass@k count it. Values the viewer
shows but does not index (message content, tool-call arguments) may be anything JSON
holds, nested as deep as the line's parser allows; they are shown through
:func:`envhub.view.conversation.laid_out`, which cuts them at a fixed depth.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, Field, ValidationError

from envhub.trajectory import (
    SCHEMA_VERSION,
    EnvRef,
    ErrorInfo,
    Timings,
    TrajectoryMetrics,
    Turn,
    Usage,
)

__all__ = [
    "BadRecord", "ViewedCall", "ViewedCompaction", "ViewedFunction", "ViewedMessage",
    "ViewedRecord", "ViewedSummary", "check_record", "describe",
]  # fmt: skip

_SQLITE_INT: Final = range(-(2**63), 2**63)
_SHOWN_ERRORS: Final = 5  # a message names this many fields at most


class BadRecord(Exception):
    """A line that is not a trajectory the viewer can show; ``code`` names why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ViewedFunction(BaseModel):
    name: str | None = None
    arguments: Any = None  # a model's text, or a parsed value: shown laid out


class ViewedCall(BaseModel):
    """A tool call, OpenAI's nested shape (``function``) or a flat one (``name``)."""

    id: str | None = None
    function: ViewedFunction | None = None
    name: str | None = None
    arguments: Any = None

    @property
    def called(self) -> ViewedFunction:
        return self.function or ViewedFunction(name=self.name, arguments=self.arguments)


class ViewedMessage(BaseModel):
    role: str
    content: Any = None  # text, OpenAI content parts, or anything: shown laid out
    tool_calls: list[ViewedCall] | None = None
    tool_call_id: str | None = None
    is_error: bool | None = None  # None: a record written before tool results carried it
    truncated: bool | None = None


class ViewedSummary(BaseModel):
    model: str | None = None
    text: Any = None  # a model's text: shown laid out
    latency_s: float | None = None


class ViewedCompaction(BaseModel):
    """A context compaction (:class:`envhub.trajectory.Compaction`), as the episode
    page marks it in the conversation."""

    turn: int
    message_index: int
    strategy: str
    trigger: str | None = None
    replaced_messages: int | None = None
    tokens_before: int | None = None
    messages: list[ViewedMessage] = Field(default_factory=list)
    summary: ViewedSummary | None = None


class ViewedRecord(BaseModel):
    """What the viewer reads of one line (other fields are ignored, whatever they hold)."""

    task_id: str
    sample_index: int = 0
    trajectory_id: str | None = None
    env: EnvRef | None = None
    model: str | None = None
    served_by: str | None = None
    messages: list[ViewedMessage] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    reward: float | None = None
    reward_components: dict[str, float] = Field(default_factory=dict)
    stop_reason: str | None = None
    error: ErrorInfo | None = None
    masked: bool = False
    metrics: TrajectoryMetrics = Field(default_factory=TrajectoryMetrics)
    timings: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    tree_id: str | None = None
    parent_id: str | None = None
    branch_turn: int | None = None
    compactions: list[ViewedCompaction] | None = None

    def indexed_ints(self) -> dict[str, int | None]:
        """The integers the index stores, by field (each must fit an sqlite INTEGER)."""
        return {
            "sample_index": self.sample_index,
            "branch_turn": self.branch_turn,
            "metrics.turns": self.metrics.turns,
            "metrics.tool_calls": self.metrics.tool_calls,
            "metrics.tool_errors": self.metrics.tool_errors,
            "usage.prompt_tokens": self.usage.prompt_tokens,
            "usage.completion_tokens": self.usage.completion_tokens,
            **{f"turns.{i}.policy_version": t.policy_version for i, t in enumerate(self.turns)},
        }


def describe(exc: ValidationError, limit: int = _SHOWN_ERRORS) -> str:
    """A bounded message naming the fields that failed (never the values: one may be
    huge, or nested too deep to print)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    named = [f"{'.'.join(map(str, e['loc'])) or 'the record'}: {e['msg']}" for e in errors]
    more = f"; and {len(named) - limit} more" if len(named) > limit else ""
    return "; ".join(named[:limit]) + more


def check_record(record: dict[str, Any]) -> ViewedRecord:
    """The viewed fields of a parsed line; raises :class:`BadRecord` (code
    ``unknown_schema_version``, ``not_a_trajectory`` or ``bad_field``) for a line the
    viewer cannot show."""
    version = record.get("schema_version", 1)  # none: written before it was recorded
    if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:
        raise BadRecord(
            "unknown_schema_version",
            f"schema_version {_short(version)}: this envhub reads versions 1 to {SCHEMA_VERSION} "
            "(a newer envhub wrote it: upgrade to view it)",
        )
    if not isinstance(record.get("task_id"), str):
        raise BadRecord("not_a_trajectory", "a JSON record without a task_id")
    if version == 2 and not (
        isinstance(record.get("parent_id"), str)
        and type(record.get("branch_turn")) is int
        and type(record.get("branch_message")) is int
    ):
        raise BadRecord("bad_field", "a tree child (schema_version 2) without parent_id, "
                        "branch_turn or branch_message")  # fmt: skip
    try:
        viewed = ViewedRecord.model_validate(record, strict=True)
    except ValidationError as exc:
        raise BadRecord("bad_field", describe(exc)) from None
    ints = viewed.indexed_ints().items()
    out_of_range = [name for name, v in ints if v is not None and v not in _SQLITE_INT]
    if out_of_range:
        raise BadRecord("bad_field", f"{', '.join(out_of_range)}: out of range (64-bit)")
    if not viewed.masked and viewed.reward is None:
        raise BadRecord("bad_field", "reward: a scored episode (masked false) needs a number")
    return viewed


def _short(value: Any) -> str:
    """``value`` for a message: a number or a short string as written, else its type."""
    if isinstance(value, int | float) or (isinstance(value, str) and len(value) <= 40):
        return repr(value)
    return f"of type {type(value).__name__}"

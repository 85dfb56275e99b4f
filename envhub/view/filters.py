"""The episodes table's filters and sort orders, validated where they enter (query
parameters) and turned into one parameterised SQL clause for the index."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["EpisodeFilter", "EpisodeOrder"]

EpisodeOrder = Literal["line", "reward", "-reward", "turns", "-turns", "task", "-time"]


class EpisodeFilter(BaseModel):
    """Which episodes to list; every field is optional and they combine with AND."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reward_min: float | None = None
    reward_max: float | None = None
    stop_reason: str | None = Field(None, max_length=200)
    masked: bool | None = None
    error_kind: str | None = Field(None, max_length=200, description="masked or tool error kind")
    task: str | None = Field(None, max_length=200, description="substring of the task id")
    tool: str | None = Field(None, max_length=200, description="a tool the model called")
    turns_min: int | None = Field(None, ge=0)
    turns_max: int | None = Field(None, ge=0)

    @field_validator("stop_reason", "error_kind", "task", "tool", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("reward_min", "reward_max", "masked", "turns_min", "turns_max", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    def sql(self) -> tuple[str, list[Any]]:
        """`` AND ...`` conditions and their parameters (empty when nothing is set)."""
        parts: list[str] = []
        params: list[Any] = []
        if self.reward_min is not None:
            parts.append("reward >= ?")
            params.append(self.reward_min)
        if self.reward_max is not None:
            parts.append("reward <= ?")
            params.append(self.reward_max)
        if self.stop_reason is not None:
            parts.append("coalesce(stop_reason, 'none') = ?")
            params.append(self.stop_reason)
        if self.masked is not None:
            parts.append("masked = ?")
            params.append(int(self.masked))
        if self.error_kind is not None:
            parts.append("instr(error_kinds, ?) > 0")
            params.append(f"|{self.error_kind}|")
        if self.task is not None:
            parts.append("instr(task_id, ?) > 0")
            params.append(self.task)
        if self.tool is not None:
            parts.append("instr(tools_used, ?) > 0")
            params.append(f"|{self.tool}|")
        if self.turns_min is not None:
            parts.append("turns >= ?")
            params.append(self.turns_min)
        if self.turns_max is not None:
            parts.append("turns <= ?")
            params.append(self.turns_max)
        return "".join(f" AND {p}" for p in parts), params

    def query(self) -> dict[str, str]:
        """The set fields as query parameters (for paging links that keep the filters)."""
        return {
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in self.model_dump(exclude_none=True).items()
        }

"""Per-episode budgets, enforced by the session for every environment alike."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Budgets"]


class Budgets(BaseModel):
    """Limits on one episode.

    Environments declare defaults as a class attribute; users override single fields
    (``--max-turns``, ``make(..., budgets=...)``) and :meth:`merged` keeps the rest.
    """

    model_config = ConfigDict(frozen=True)

    max_turns: int = Field(
        10,
        ge=1,
        description="assistant turns before the episode stops, counted over the whole "
        "episode (all its user turns together)",
    )
    tool_timeout_s: float = Field(30.0, gt=0, description="wall clock per tool call")
    episode_timeout_s: float = Field(600.0, gt=0, description="wall clock per episode")
    max_output_chars: int = Field(
        16_000, ge=64, description="tool output beyond this is cut in the middle"
    )

    def merged(self, **overrides: object) -> Budgets:
        """A copy with the given fields replaced; ``None`` values keep the current field."""
        changes = {k: v for k, v in overrides.items() if v is not None}
        return self.model_validate({**self.model_dump(), **changes}) if changes else self

    def over(self, defaults: Budgets) -> Budgets:
        """``defaults`` (an environment's own budgets) with the fields set on this object
        replaced: ``Budgets(max_turns=3).over(env_class.budgets)`` keeps the environment's
        timeouts, so a caller overrides what it names and nothing else."""
        return defaults.merged(**self.model_dump(include=self.model_fields_set))

"""How an MCP episode is scored: a match of the ``answer`` against the task's answer, or
an operator's Python function.

``reward`` is ``"exact"`` (SQuAD-normalised exact match), ``"f1"`` (token F1),
``"numeric"`` (numbers equal within 1e-6 relative) or ``"module:function"``, called as
``function(task, transcript, final)`` with the :class:`~envhub.Task`, the list of the
episode's server tool calls (:class:`CallRecord` dicts) and the submitted answer (None
when the model never called ``answer``); it returns a float or an :class:`~envhub.Reward`.
A task may pick one of the three matches for itself with ``metadata.reward``. Importing a
module runs its code, so a function is operator configuration only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Literal, TypedDict, get_args

from envhub import Reward, Task
from envhub.rewards import Rubric, exact_match, f1, numeric_match

__all__ = ["MATCHES", "CallRecord", "Match", "RewardFunction", "Scorer"]

Match = Literal["exact", "f1", "numeric"]
MATCHES: tuple[str, ...] = get_args(Match)


class CallRecord(TypedDict):
    """One forwarded tool call of the transcript a reward function receives."""

    tool: str
    arguments: dict[str, Any]
    output: str
    is_error: bool


RewardFunction = Callable[[Task, list[CallRecord], "str | None"], "Reward | float"]

_MATCHERS: dict[str, Callable[[str, Any], float]] = {
    "exact": exact_match,
    "f1": f1,
    "numeric": numeric_match,
}
_RUBRIC = Rubric({"correct": 1.0, "answered": 0.0})


def _import_function(spec: str) -> RewardFunction:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"reward {spec!r}: cannot import {module_name!r}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"reward {spec!r}: {module_name} has no function {attr!r}")
    return fn  # type: ignore[no-any-return]


class Scorer:
    """The episode scorer for one ``reward`` setting, resolved (and imported) up front so
    that a typo fails when the environment is made, not in the first episode's reward."""

    def __init__(self, reward: str = "exact") -> None:
        self.spec = reward
        if reward in MATCHES:
            self.function: RewardFunction | None = None
        elif ":" in reward:
            self.function = _import_function(reward)
        else:
            raise ValueError(
                f"unknown reward {reward!r}: use one of {', '.join(MATCHES)} or module:function"
            )

    def score(self, task: Task, transcript: list[CallRecord], final: str | None) -> Reward:
        if self.function is not None:
            value = self.function(task, list(transcript), final)
            return value if isinstance(value, Reward) else Reward(value=float(value))
        match = task.metadata.get("reward", self.spec)
        if match not in _MATCHERS:
            raise ValueError(f"task {task.id}: metadata.reward {match!r} is not one of {MATCHES}")
        correct = _MATCHERS[match](final, task.answer) if final is not None else 0.0
        return _RUBRIC.score(
            {"correct": correct, "answered": float(final is not None)}, submitted=final, match=match
        )

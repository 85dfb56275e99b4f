"""A weighted combination of named reward components."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envhub.types import Reward

__all__ = ["Rubric"]


@dataclass
class Rubric:
    """Named components with weights; weight 0 records a metric without scoring it.

    ``Rubric({"correct": 1.0, "format": 0.1}).score({"correct": 1, "format": 0})``
    gives ``Reward(value=1.0, components={"correct": 1.0, "format": 0.0})``; with
    ``normalize=True`` the value is divided by the sum of the weights.
    """

    weights: Mapping[str, float]
    normalize: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def score(self, components: Mapping[str, float], **info: Any) -> Reward:
        missing = set(self.weights) - set(components)
        if missing:
            raise ValueError(f"rubric components missing: {', '.join(sorted(missing))}")
        value = sum(self.weights[name] * float(components[name]) for name in self.weights)
        if self.normalize:
            total = sum(w for w in self.weights.values() if w)
            value = value / total if total else 0.0
        return Reward(
            value=value,
            components={name: float(v) for name, v in components.items()},
            info={**self.info, **info},
        )

    def evaluate(self, funcs: Mapping[str, Callable[[], float]], **info: Any) -> Reward:
        """Compute each component by calling its function, then :meth:`score`."""
        return self.score({name: fn() for name, fn in funcs.items()}, **info)

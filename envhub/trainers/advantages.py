"""Group-relative advantage estimators for GRPO-style trainers.

All estimators work on one GRPO group at a time (the samples of one task drawn with the
same policy): a sample's advantage is its reward compared with the rest of its group.

- ``grpo``: ``(r - mean) / (std + eps)`` (DeepSeekMath; sample std, as TRL and verl use).
- ``dr_grpo``: ``r - mean`` ("Dr. GRPO", Liu et al. 2025): no std division, which
  otherwise up-weights groups that are nearly all right or all wrong.
- ``rloo``: ``r_i - mean_{j != i} r_j`` (REINFORCE leave-one-out), an unbiased baseline.

:func:`task_normalize` then rescales advantages per task type across a multi-task batch
(AgentRL, Zhang et al. 2025): environments with different reward scales and success rates
otherwise contribute gradients of very different sizes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

from envhub.errors import InvalidRequest

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "compute_advantages",
    "group_advantages",
    "task_normalize",
]

Estimator = Literal["grpo", "dr_grpo", "rloo"]
ESTIMATORS: tuple[Estimator, ...] = ("grpo", "dr_grpo", "rloo")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _sample_std(values: Sequence[float], mean: float) -> float:
    if len(values) < 2:
        return 0.0
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def group_advantages(
    rewards: Sequence[float], estimator: Estimator = "grpo", *, eps: float = 1e-6
) -> list[float]:
    """The advantages of the samples of one group, in order.

    A group of one sample has no baseline to compare with: its advantage is 0 under every
    estimator (so it contributes no gradient instead of a made-up one).
    """
    if estimator not in ESTIMATORS:
        raise InvalidRequest(f"unknown advantage estimator {estimator!r}; use one of {ESTIMATORS}")
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    mean = _mean(rewards)
    if estimator == "grpo":
        std = _sample_std(rewards, mean)
        return [(r - mean) / (std + eps) for r in rewards]
    if estimator == "dr_grpo":
        return [r - mean for r in rewards]
    # rloo: r_i - (sum - r_i) / (n - 1) == n / (n - 1) * (r_i - mean)
    scale = n / (n - 1)
    return [scale * (r - mean) for r in rewards]


def task_normalize(
    advantages: Sequence[float], task_keys: Sequence[Hashable], *, eps: float = 1e-6
) -> list[float]:
    """Standardise advantages within each task type of a batch (AgentRL).

    Each task type's advantages are shifted to mean 0 and scaled to unit (sample) std; a
    task type whose advantages are all equal keeps them centred but unscaled.
    """
    if len(advantages) != len(task_keys):
        raise InvalidRequest("task_normalize needs one task key per advantage")
    by_task: dict[Hashable, list[int]] = defaultdict(list)
    for index, key in enumerate(task_keys):
        by_task[key].append(index)
    out = list(advantages)
    for indices in by_task.values():
        values = [advantages[i] for i in indices]
        mean = _mean(values)
        std = _sample_std(values, mean)
        for i in indices:
            out[i] = (advantages[i] - mean) / (std + eps) if std > 0 else advantages[i] - mean
    return out


def compute_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    *,
    estimator: Estimator = "grpo",
    task_keys: Sequence[Hashable] | None = None,
    eps: float = 1e-6,
) -> list[float]:
    """Advantages for a flat batch: grouped by ``group_ids`` (any order), then optionally
    task-normalised by ``task_keys`` (e.g. the environment name of each sample)."""
    if len(rewards) != len(group_ids):
        raise InvalidRequest("compute_advantages needs one group id per reward")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(group_ids):
        members[group].append(index)
    out = [0.0] * len(rewards)
    for indices in members.values():
        advantages = group_advantages([rewards[i] for i in indices], estimator, eps=eps)
        for i, advantage in zip(indices, advantages, strict=True):
            out[i] = advantage
    if task_keys is not None:
        out = task_normalize(out, task_keys, eps=eps)
    return out

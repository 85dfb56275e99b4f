"""GRPO batches from envhub trajectories: advantages, token rows, masks, padding.

:func:`build_batch` is the trainer-agnostic core of every adapter. For a list of
trajectories (several GRPO groups, possibly from several environments) it

1. sets masked trajectories (infra failures) aside: they have no reward, so they are
   neither scored as zero nor counted in their group's baseline;
2. computes one advantage per trajectory within its group (:mod:`.advantages`), with
   optional AgentRL task-level normalization across the batch;
3. drops groups whose rewards are all equal (no learning signal) unless told not to;
4. cuts each trajectory into token rows (:mod:`.tokens`), enforcing the invariants, and
   sets aside rows that carry a ``mask_reason`` (counted in :attr:`GRPOBatch.dropped`);
5. pads the rows (right padding) into tensors, or lists when torch is not wanted.

Per-token ``advantages`` are the trajectory's advantage on sampled tokens and 0
elsewhere, so ``loss = -(advantages * ratio).sum() / loss_mask.sum()`` needs no more masking.
"""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from envhub.errors import InvalidRequest
from envhub.trainers.advantages import (
    ESTIMATORS,
    Estimator,
    compute_advantages,
    group_advantages,
    task_normalize,
)
from envhub.trainers.token_rows import NOT_SAMPLED, DriftPolicy, TokenRow, trajectory_rows
from envhub.trajectory import Trajectory

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "GRPOBatch",
    "TaskKey",
    "build_batch",
    "compute_advantages",
    "group_advantages",
    "pad_rows",
    "task_normalize",
]

TaskKey = Literal["env", "task"] | Callable[[Trajectory], Hashable]
_TENSOR_FIELDS = (
    "input_ids",
    "attention_mask",
    "loss_mask",
    "old_logprobs",
    "advantages",
    "policy_versions",
)


@dataclass
class GRPOBatch:
    """Padded training data plus the bookkeeping a trainer logs.

    The six array fields are ``torch.Tensor`` of shape ``(rows, length)`` when built with
    ``return_tensors="pt"``, else lists of equal-length lists. ``row_advantages`` and
    ``rows`` are per row; ``dropped`` counts trajectories set aside by reason
    (``masked``, ``zero_variance``, ``token_drift``, ...).
    """

    input_ids: Any
    attention_mask: Any
    loss_mask: Any
    old_logprobs: Any
    advantages: Any
    policy_versions: Any
    rows: list[TokenRow]
    row_advantages: list[float]
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def retokenized(self) -> bool:
        """True when any row was rebuilt from text (its ids are not the sampled ones)."""
        return any(row.retokenized for row in self.rows)

    @property
    def min_policy_version(self) -> int | None:
        """The oldest policy version that sampled a token of this batch (for staleness)."""
        versions = [v for row in self.rows for v in set(row.policy_versions) if v != NOT_SAMPLED]
        return min(versions) if versions else None


def _task_key_fn(task_key: TaskKey | None) -> Callable[[Trajectory], Hashable] | None:
    if task_key is None or callable(task_key):
        return task_key
    if task_key == "env":
        return lambda t: t.env.name
    if task_key == "task":
        return lambda t: (t.env.name, t.task_id)
    raise InvalidRequest(f"unknown task_key {task_key!r}: use 'env', 'task' or a function")


def pad_rows(
    rows: Sequence[TokenRow],
    row_advantages: Sequence[float],
    *,
    pad_token_id: int = 0,
    pad_to_multiple_of: int | None = None,
    return_tensors: Literal["pt"] | None = "pt",
) -> dict[str, Any]:
    """The six padded arrays of :class:`GRPOBatch` for ``rows`` (right padding)."""
    length = max((len(row) for row in rows), default=0)
    if pad_to_multiple_of:
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    if return_tensors == "pt":
        return _pad_torch(rows, row_advantages, length, pad_token_id)
    if return_tensors is not None:
        raise InvalidRequest(f"return_tensors must be 'pt' or None, not {return_tensors!r}")
    out: dict[str, list[list[Any]]] = {name: [] for name in _TENSOR_FIELDS}
    for row, advantage in zip(rows, row_advantages, strict=True):
        pad = length - len(row)
        out["input_ids"].append(row.input_ids + [pad_token_id] * pad)
        out["attention_mask"].append([1] * len(row) + [0] * pad)
        out["loss_mask"].append(row.loss_mask + [0] * pad)
        out["old_logprobs"].append(row.old_logprobs + [0.0] * pad)
        out["advantages"].append([advantage * m for m in row.loss_mask] + [0.0] * pad)
        out["policy_versions"].append(row.policy_versions + [NOT_SAMPLED] * pad)
    return out


def _pad_torch(
    rows: Sequence[TokenRow], row_advantages: Sequence[float], length: int, pad_token_id: int
) -> dict[str, Any]:
    """Each row's lists go through ``array.array`` (a C loop) and ``torch.frombuffer``;
    ``torch.tensor`` on Python lists costs ~10x more (benchmarks/batch_build.py)."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    def padded(name: str, code: str, dtype: torch.dtype, fill: float) -> torch.Tensor:
        columns = [torch.frombuffer(array(code, getattr(row, name)), dtype=dtype) for row in rows]
        columns.append(torch.empty(length, dtype=dtype))  # pads to `length` even if longer
        return pad_sequence(columns, batch_first=True, padding_value=fill)[:-1]

    if not rows:
        empty = torch.zeros((0, length), dtype=torch.long)
        return {name: empty.clone() for name in _TENSOR_FIELDS} | {
            "old_logprobs": empty.float(),
            "advantages": empty.float(),
        }
    loss_mask = padded("loss_mask", "q", torch.long, 0)
    lengths = torch.tensor([len(row) for row in rows])
    advantage = torch.tensor(list(row_advantages), dtype=torch.float32).unsqueeze(1)
    return {
        "input_ids": padded("input_ids", "q", torch.long, pad_token_id),
        "attention_mask": (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long(),
        "loss_mask": loss_mask,
        "old_logprobs": padded("old_logprobs", "f", torch.float32, 0.0),
        "advantages": advantage * loss_mask,
        "policy_versions": padded("policy_versions", "q", torch.long, NOT_SAMPLED),
    }


def build_batch(
    trajectories: Iterable[Trajectory],
    *,
    estimator: Estimator = "grpo",
    task_key: TaskKey | None = None,
    drop_zero_variance: bool = True,
    drift: DriftPolicy = "split",
    tokenizer: Any = None,
    max_length: int | None = None,
    pad_token_id: int | None = None,
    pad_to_multiple_of: int | None = None,
    return_tensors: Literal["pt"] | None = "pt",
    eps: float = 1e-6,
) -> GRPOBatch:
    """A padded GRPO batch from trajectories (see the module docstring for the steps).

    ``task_key`` turns on AgentRL task-level normalization: ``"env"`` normalizes per
    environment, ``"task"`` per task, a function per whatever key it returns.
    ``tokenizer`` rebuilds ids for trajectories recorded without them (flagged
    ``retokenized``); its ``pad_token_id`` is the default padding id. Rows longer than
    ``max_length`` are dropped as ``overlong``.
    """
    trajectories = list(trajectories)
    dropped: Counter[str] = Counter()
    scored = [t for t in trajectories if not t.masked and t.reward is not None]
    dropped["masked"] += len(trajectories) - len(scored)

    members: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in scored:
        members[trajectory.group_id].append(trajectory)
    if drop_zero_variance:
        kept = []
        for group in members.values():
            if len({t.reward for t in group}) > 1:
                kept.extend(group)
            else:
                dropped["zero_variance"] += len(group)
    else:
        kept = [t for group in members.values() for t in group]

    key_fn = _task_key_fn(task_key)
    advantages = compute_advantages(
        [t.reward for t in kept if t.reward is not None],  # all of them: kept are scored
        [t.group_id for t in kept],
        estimator=estimator,
        task_keys=[key_fn(t) for t in kept] if key_fn else None,
        eps=eps,
    )

    rows: list[TokenRow] = []
    row_advantages: list[float] = []
    for trajectory, advantage in zip(kept, advantages, strict=True):
        trajectory_rows_ = trajectory_rows(trajectory, drift=drift, tokenizer=tokenizer)
        reasons = {row.mask_reason for row in trajectory_rows_ if row.mask_reason is not None}
        if max_length is not None and any(len(row) > max_length for row in trajectory_rows_):
            reasons.add("overlong")
        if reasons:
            dropped[sorted(reasons)[0]] += 1
            continue
        rows.extend(trajectory_rows_)
        row_advantages.extend([advantage] * len(trajectory_rows_))

    if pad_token_id is None:
        pad_token_id = getattr(tokenizer, "pad_token_id", None) or 0
    arrays = pad_rows(
        rows,
        row_advantages,
        pad_token_id=pad_token_id,
        pad_to_multiple_of=pad_to_multiple_of,
        return_tensors=return_tensors,
    )
    return GRPOBatch(
        **arrays,
        rows=rows,
        row_advantages=row_advantages,
        dropped={k: v for k, v in dropped.items() if v},
    )

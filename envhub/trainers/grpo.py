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

With ``tree=`` (``"treerl"`` or ``"treerl_sqrt"``) the groups that hold tree rollouts get
per-node advantages instead (:mod:`.tree_advantages`): a token's advantage is that of
the node (segment of turns between branch points) it was sampled in, so one row carries
several values; the turns a child shares with its parent are masked in the child's row
(trained once, in the row of the trajectory that played them), and a tree with a masked
leaf is dropped whole (``masked_tree``): its nodes' values would be means over the
leaves that happened not to fail, and a masked root leaves its shared turns untrained.
Without ``tree`` a tree's leaves are one GRPO group like any other (the flat baseline),
each trained whole. The first ``gold_prefix_turns`` turns (replayed, not sampled) are
never trained.
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
from envhub.trainers.tree_advantages import (
    TreeEstimator,
    batch_turn_advantages,
    broken_trees,
    row_token_advantages,
)
from envhub.trainers.turn_rewards import (
    check_gamma,
    row_token_rewards,
    turn_returns,
    turn_rewards,
)
from envhub.trajectory import Trajectory

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "GRPOBatch",
    "TaskKey",
    "TreeEstimator",
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
    ``return_tensors="pt"``, else lists of equal-length lists; ``advantages`` is per token
    (one value per row, or per tree node a row spans). ``row_advantages`` and ``rows`` are
    per row (a tree row's ``row_advantages`` entry is its leaf node's advantage);
    ``dropped`` counts trajectories set aside by reason (``masked``, ``masked_tree``,
    ``incomplete_tree``, ``zero_variance``, ``token_drift``, ...).

    ``token_rewards`` and ``returns`` (built with ``gamma``, else ``None``) are per token
    and shaped like ``advantages``: each turn's reward on the last token it sampled, the
    final reward added at the last turn's, and each turn's discounted return on every
    token it sampled; 0 on tokens no trained turn sampled
    (:mod:`envhub.trainers.turn_rewards` gives the formula).
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
    token_rewards: Any = None
    returns: Any = None

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
    token_advantages: Sequence[Sequence[float]] | None = None,
) -> dict[str, Any]:
    """The six padded arrays of :class:`GRPOBatch` for ``rows`` (right padding).

    ``advantages`` is ``row_advantages[i]`` on row ``i``'s trained tokens, or, where
    ``token_advantages`` is given, its row ``i`` (one value per token) as it is."""
    length = max((len(row) for row in rows), default=0)
    if pad_to_multiple_of:
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    if return_tensors == "pt":
        return _pad_torch(rows, row_advantages, length, pad_token_id, token_advantages)
    if return_tensors is not None:
        raise InvalidRequest(f"return_tensors must be 'pt' or None, not {return_tensors!r}")
    out: dict[str, list[list[Any]]] = {name: [] for name in _TENSOR_FIELDS}
    if token_advantages is None:
        token_advantages = [
            [a * m for m in row.loss_mask] for row, a in zip(rows, row_advantages, strict=True)
        ]
    for row, advantages in zip(rows, token_advantages, strict=True):
        pad = length - len(row)
        out["input_ids"].append(row.input_ids + [pad_token_id] * pad)
        out["attention_mask"].append([1] * len(row) + [0] * pad)
        out["loss_mask"].append(row.loss_mask + [0] * pad)
        out["old_logprobs"].append(row.old_logprobs + [0.0] * pad)
        out["advantages"].append(list(advantages) + [0.0] * pad)
        out["policy_versions"].append(row.policy_versions + [NOT_SAMPLED] * pad)
    return out


def _pad_torch(
    rows: Sequence[TokenRow],
    row_advantages: Sequence[float],
    length: int,
    pad_token_id: int,
    token_advantages: Sequence[Sequence[float]] | None,
) -> dict[str, Any]:
    """Each row's lists go through ``array.array`` (a C loop) and ``torch.frombuffer``;
    ``torch.tensor`` on Python lists costs ~10x more (benchmarks/batch_build.py)."""
    import torch

    def padded(name: str, code: str, dtype: torch.dtype, fill: float) -> torch.Tensor:
        return _padded_tensor([getattr(row, name) for row in rows], length, code, dtype, fill)

    if not rows:
        empty = torch.zeros((0, length), dtype=torch.long)
        return {name: empty.clone() for name in _TENSOR_FIELDS} | {
            "old_logprobs": empty.float(),
            "advantages": empty.float(),
        }
    loss_mask = padded("loss_mask", "q", torch.long, 0)
    lengths = torch.tensor([len(row) for row in rows])
    if token_advantages is None:
        advantage = torch.tensor(list(row_advantages), dtype=torch.float32).unsqueeze(1)
        advantages = advantage * loss_mask
    else:
        advantages = _padded_tensor(token_advantages, length, "f", torch.float32, 0.0)
    return {
        "input_ids": padded("input_ids", "q", torch.long, pad_token_id),
        "attention_mask": (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long(),
        "loss_mask": loss_mask,
        "old_logprobs": padded("old_logprobs", "f", torch.float32, 0.0),
        "advantages": advantages,
        "policy_versions": padded("policy_versions", "q", torch.long, NOT_SAMPLED),
    }


def _padded_tensor(
    lists: Sequence[Sequence[Any]], length: int, code: str, dtype: Any, fill: float
) -> Any:
    """``lists`` right-padded with ``fill`` to ``length`` as one ``(len(lists), length)``
    tensor, each list through ``array.array`` (a C loop) and ``torch.frombuffer``."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    columns = [torch.frombuffer(array(code, values), dtype=dtype) for values in lists]
    columns.append(torch.empty(length, dtype=dtype))  # pads to `length` even if longer
    return pad_sequence(columns, batch_first=True, padding_value=fill)[:-1]


def _padded_floats(
    lists: Sequence[Sequence[float]], length: int, return_tensors: Literal["pt"] | None
) -> Any:
    """Per-token float rows padded with 0.0 to ``length``, as :func:`pad_rows` pads."""
    if return_tensors != "pt":
        return [list(values) + [0.0] * (length - len(values)) for values in lists]
    import torch

    return _padded_tensor(lists, length, "f", torch.float32, 0.0)


def build_batch(
    trajectories: Iterable[Trajectory],
    *,
    estimator: Estimator = "grpo",
    task_key: TaskKey | None = None,
    tree: TreeEstimator | None = None,
    drop_zero_variance: bool = True,
    drift: DriftPolicy = "split",
    tokenizer: Any = None,
    max_length: int | None = None,
    pad_token_id: int | None = None,
    pad_to_multiple_of: int | None = None,
    return_tensors: Literal["pt"] | None = "pt",
    eps: float = 1e-6,
    gamma: float | None = None,
) -> GRPOBatch:
    """A padded GRPO batch from trajectories (see the module docstring for the steps).

    ``task_key`` turns on AgentRL task-level normalization: ``"env"`` normalizes per
    environment, ``"task"`` per task, a function per whatever key it returns.
    ``tree`` gives the groups that hold tree rollouts per-node advantages (module
    docstring); ``estimator`` and ``task_key`` then apply to the other groups only
    (``task_key`` with ``tree`` is refused: a per-node advantage has no one value per
    trajectory to normalise). ``tokenizer`` rebuilds ids for trajectories recorded
    without them (flagged ``retokenized``); its ``pad_token_id`` is the default padding
    id. Rows longer than ``max_length`` are dropped as ``overlong``. ``gamma`` (a
    discount in [0, 1]) also builds the per-token ``token_rewards`` and ``returns`` of
    turn-level rewards (:class:`GRPOBatch`); the advantages stay the episode rewards'.
    """
    if tree is not None and task_key is not None:
        raise InvalidRequest("task_key normalization does not apply to tree advantages")
    if gamma is not None:
        gamma = check_gamma(gamma)
    trajectories = list(trajectories)
    dropped: Counter[str] = Counter()
    scored = [t for t in trajectories if not t.masked and t.reward is not None]
    dropped["masked"] += len(trajectories) - len(scored)
    if tree is not None:
        broken = broken_trees(trajectories)
        for trajectory in scored:
            if (trajectory.tree_id or "") in broken:
                dropped[broken[trajectory.tree_id or ""]] += 1
        scored = [t for t in scored if (t.tree_id or "") not in broken]

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

    # tree groups: each trajectory's turn advantages (a group's are its own: those of
    # the groups dropped above do not change them)
    per_turn = batch_turn_advantages(kept, tree) if tree is not None else {}
    flat = [t for t in kept if t.trajectory_id not in per_turn]
    key_fn = _task_key_fn(task_key)
    flat_advantages = compute_advantages(
        [t.reward for t in flat if t.reward is not None],  # all of them: kept are scored
        [t.group_id for t in flat],
        estimator=estimator,
        task_keys=[key_fn(t) for t in flat] if key_fn else None,
        eps=eps,
    )
    advantages = dict(zip((t.trajectory_id for t in flat), flat_advantages, strict=True))

    rows: list[TokenRow] = []
    row_advantages: list[float] = []
    tree_tokens: list[list[float] | None] = []  # a tree row's per-token values, else None
    token_rewards: list[list[float]] = []  # with gamma: per row, per token
    token_returns: list[list[float]] = []
    for trajectory in kept:
        turns = per_turn.get(trajectory.trajectory_id)
        trajectory_rows_ = trajectory_rows(
            trajectory, drift=drift, tokenizer=tokenizer, mask_shared_prefix=turns is not None
        )
        reasons = {row.mask_reason for row in trajectory_rows_ if row.mask_reason is not None}
        if max_length is not None and any(len(row) > max_length for row in trajectory_rows_):
            reasons.add("overlong")
        if reasons:
            dropped[sorted(reasons)[0]] += 1
            continue
        rows.extend(trajectory_rows_)
        if gamma is not None:
            rewards, returns = turn_rewards(trajectory), turn_returns(trajectory, gamma)
            token_rewards.extend(row_token_rewards(r, rewards) for r in trajectory_rows_)
            token_returns.extend(row_token_advantages(r, returns) for r in trajectory_rows_)
        if turns is None:
            advantage = advantages[trajectory.trajectory_id]
            row_advantages.extend([advantage] * len(trajectory_rows_))
            tree_tokens.extend([None] * len(trajectory_rows_))
        else:
            leaf = turns[-1] if turns else 0.0
            row_advantages.extend([leaf] * len(trajectory_rows_))
            tree_tokens.extend(row_token_advantages(r, turns) for r in trajectory_rows_)

    if pad_token_id is None:
        pad_token_id = getattr(tokenizer, "pad_token_id", None) or 0
    arrays = pad_rows(
        rows,
        row_advantages,
        pad_token_id=pad_token_id,
        pad_to_multiple_of=pad_to_multiple_of,
        return_tensors=return_tensors,
        token_advantages=_token_advantages(rows, row_advantages, tree_tokens) if per_turn else None,
    )
    turn_arrays: dict[str, Any] = {}
    if gamma is not None:
        length = len(arrays["input_ids"][0]) if rows else 0
        turn_arrays = {
            "token_rewards": _padded_floats(token_rewards, length, return_tensors),
            "returns": _padded_floats(token_returns, length, return_tensors),
        }
    return GRPOBatch(
        **arrays,
        rows=rows,
        row_advantages=row_advantages,
        dropped={k: v for k, v in dropped.items() if v},
        **turn_arrays,
    )


def _token_advantages(
    rows: Sequence[TokenRow],
    row_advantages: Sequence[float],
    tree_tokens: Sequence[list[float] | None],
) -> list[list[float]]:
    """Per-token advantages of a batch that holds tree rows: those rows' own, the other
    rows' value on their trained tokens. Built only then: a flat batch's advantages are a
    row value times the mask, computed in torch (Python lists per token cost ~10x)."""
    return [
        values if values is not None else [advantage * m for m in row.loss_mask]
        for row, advantage, values in zip(rows, row_advantages, tree_tokens, strict=True)
    ]


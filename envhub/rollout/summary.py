"""The end-of-run summary: mean reward, pass@1 and unbiased pass@k, stop reasons, tokens.

pass@k uses the unbiased estimator of Chen et al. (2021): for a task with ``n`` scored
samples of which ``c`` succeed, ``pass@k = 1 - C(n-c, k) / C(n, k)``, averaged over the
tasks with at least ``k`` scored samples. Masked samples are not scored, so they count
neither as failures nor as samples.

Where the episodes ran: ``by_replica`` counts episodes and masked ones per server
replica (``served_by``; in-process runs have none), and ``retried`` counts the failed
attempts that were retried, by error kind (a replica lost mid-episode: ``replica_lost``).

A run that ends before every planned episode has a record says so: ``missing`` counts
the (task, sample) pairs without one and ``stopped`` says why (``"deadline"``: the time
limit; ``"interrupted"``: the run's ``stop`` event, which ``envhub rollout`` sets on
SIGINT or SIGTERM; ``"circuit_breaker"``: too many episodes in a row were masked,
``stop_detail`` says which failure).

Per task: ``pass_rate_by_task`` is each task's share of scored samples that passed, over
every sample of it (a sampled run draws a task several times); a sampled run
(``--sampler``) also counts the groups it kept and dropped (``groups_kept``,
``groups_dropped``). Episodes restarted from a gold prefix (``--gold-restart-after``) are
counted apart (``gold_prefix_episodes``, and the share of them that passed,
``gold_prefix_pass_rate``): pass@k and the per-task pass rates are the policy's own,
over the episodes it played from the start (a pass after a gold prefix is not one).

Throughput: :func:`episodes_per_s` is the one rate, shown live by ``envhub rollout``'s
progress and recorded as the summary's ``episodes_per_s``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from math import comb
from typing import Any

from pydantic import BaseModel, Field

from envhub.trajectory import EnvRef, Trajectory

__all__ = [
    "ReplicaCounts",
    "RunSummary",
    "episodes_per_s",
    "k_values",
    "pass_at_k",
    "summarize",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that ``k`` of ``n`` samples (``c`` of them correct) include a correct one."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def episodes_per_s(episodes: int, elapsed_s: float | None) -> float | None:
    """Episodes finished per second of the run's dispatch clock (``None`` before any
    finished or any time passed): the live progress and the summary both use it, with
    the clock started when the run planned its episodes, so they cannot disagree."""
    return episodes / elapsed_s if episodes and elapsed_s else None


def k_values(group_size: int) -> list[int]:
    """1, then powers of two below the group size, then the group size itself."""
    ks = [1]
    while ks[-1] * 2 < group_size:
        ks.append(ks[-1] * 2)
    if group_size > 1:
        ks.append(group_size)
    return ks


class ReplicaCounts(BaseModel):
    """Episodes whose last attempt ran on one replica, and how many of them are masked."""

    episodes: int = 0
    masked: int = 0


class RunSummary(BaseModel):
    """What :func:`summarize` counts, plus what the run itself knows: its plan, why it
    stopped, and ``env``, the environment and its pins (distribution, version, task-set
    hash) the run used (``None``: a summary of records alone, such as the viewer's)."""

    env: EnvRef | None = None
    episodes: int
    scored: int
    masked: int
    tasks: int
    mean_reward: float | None
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    pass_rate_by_task: dict[str, float] = Field(default_factory=dict)
    success_threshold: float
    stop_reasons: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict)
    retried: dict[str, int] = Field(default_factory=dict)
    by_replica: dict[str, ReplicaCounts] = Field(default_factory=dict)
    mean_turns: float | None = None
    tool_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    elapsed_s: float | None = None
    episodes_this_run: int | None = None
    episodes_per_s: float | None = None
    planned: int | None = None
    missing: int | None = None
    stopped: str | None = None
    stop_detail: str | None = None
    groups_kept: int | None = None
    groups_dropped: int | None = None
    trees: int | None = Field(None, description="tree rollouts: how many trees")
    tree_nodes: int | None = Field(
        None, description="their nodes: segments of turns between branch points"
    )
    tree_leaves: int | None = Field(None, description="their leaves: whole episodes")
    gold_prefix_episodes: int | None = Field(
        None, description="episodes restarted from a gold prefix (None: a run without restarts)"
    )
    gold_prefix_pass_rate: float | None = Field(
        None, description="the share of those, scored, that passed"
    )

    @property
    def masked_fraction(self) -> float:
        return self.masked / self.episodes if self.episodes else 0.0


_SUMMARIZED = {
    "task_id", "reward", "masked", "stop_reason", "error", "metrics", "usage", "served_by",
    "tree_id", "parent_id", "branch_turn", "gold_prefix_turns",
}


def summarize(
    records: Iterable[dict[str, Any] | Trajectory],
    *,
    success_threshold: float = 1.0,
    elapsed_s: float | None = None,
    episodes_this_run: int | None = None,
    max_k: int | None = None,
) -> RunSummary:
    """Summarize trajectories, or raw records as read from a trajectory file (one per
    (task, sample): see :func:`envhub.trajectory.latest_records`).

    A sample succeeds when its reward is at least ``success_threshold``. ``max_k``: the
    largest k of pass@k (a sampled run's group size; default: the most samples of a task).
    """
    episodes = masked = prompt_tokens = completion_tokens = tool_errors = turns = 0
    rewards: list[float] = []
    by_task: dict[str, list[bool]] = defaultdict(list)
    stops: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    retried: Counter[str] = Counter()
    by_replica: dict[str, ReplicaCounts] = {}
    trees: set[str] = set()
    leaves = 0
    branches: Counter[tuple[str, int]] = Counter()  # (parent, turn): children forked there
    gold: list[bool] = []  # the passes of the scored episodes restarted from a gold prefix
    gold_episodes = 0
    for item in records:
        record = item.model_dump(include=_SUMMARIZED) if isinstance(item, Trajectory) else item
        episodes += 1
        if record.get("tree_id") is not None:
            trees.add(str(record["tree_id"]))
            leaves += 1
            if record.get("parent_id") is not None:
                branches[(str(record["parent_id"]), int(record.get("branch_turn") or 0))] += 1
        stops[record.get("stop_reason") or "none"] += 1
        usage = record.get("usage") or {}
        prompt_tokens += usage.get("prompt_tokens", 0)
        completion_tokens += usage.get("completion_tokens", 0)
        metrics = record.get("metrics") or {}
        tool_errors += metrics.get("tool_errors", 0)
        turns += metrics.get("turns", 0)
        retried.update(metrics.get("retried_errors") or {})
        served_by = record.get("served_by")
        replica = by_replica.setdefault(served_by, ReplicaCounts()) if served_by else None
        if replica is not None:
            replica.episodes += 1
        by_task.setdefault(record["task_id"], [])
        from_gold = bool(record.get("gold_prefix_turns"))
        gold_episodes += from_gold
        if record.get("masked"):
            masked += 1
            if replica is not None:
                replica.masked += 1
            errors[(record.get("error") or {}).get("kind", "unknown")] += 1
            continue
        reward = float(record["reward"])
        rewards.append(reward)
        (gold if from_gold else by_task[record["task_id"]]).append(reward >= success_threshold)
    group = max((len(v) for v in by_task.values()), default=0)
    group = group if max_k is None else min(group, max_k)
    passes: dict[str, float] = {}
    for k in k_values(group) if group else []:
        eligible = [v for v in by_task.values() if len(v) >= k]
        if eligible:
            passes[f"pass@{k}"] = sum(pass_at_k(len(v), sum(v), k) for v in eligible) / len(
                eligible
            )
    return RunSummary(
        episodes=episodes,
        scored=len(rewards),
        masked=masked,
        tasks=len(by_task),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        pass_at_k=passes,
        pass_rate_by_task={t: sum(v) / len(v) for t, v in sorted(by_task.items()) if v},
        success_threshold=success_threshold,
        stop_reasons=dict(stops),
        errors=dict(errors),
        retried=dict(retried),
        by_replica=dict(sorted(by_replica.items())),
        mean_turns=turns / episodes if episodes else None,
        tool_errors=tool_errors,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        elapsed_s=elapsed_s,
        episodes_this_run=episodes_this_run,
        episodes_per_s=episodes_per_s(episodes_this_run or 0, elapsed_s),
        # a node per tree root, and per branch point its children and the parent's own
        # continuation; every record of a tree is a leaf
        trees=len(trees) if trees else None,
        tree_nodes=len(trees) + sum(n + 1 for n in branches.values()) if trees else None,
        tree_leaves=leaves if trees else None,
        gold_prefix_episodes=gold_episodes or None,
        gold_prefix_pass_rate=sum(gold) / len(gold) if gold else None,
    )

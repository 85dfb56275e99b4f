"""Per-node advantages for tree rollouts, after TreeRL (Hou et al., "TreeRL: LLM
Reinforcement Learning with On-Policy Tree Search", ACL 2025, arXiv:2506.11902, §3.2).

A tree rollout (:mod:`envhub.rollout.tree`) records whole leaves: each trajectory plays
from the root, a child shares its parent's first ``branch_turn`` turns. The tree's
**nodes** are the segments of turns between branch points, rebuilt from the leaves'
``parent_id`` and ``branch_turn``: a trajectory ``T`` that starts its own turns at ``b``
(0 for the root) and whose children were forked after turns ``c1 < c2 < ...`` plays the
nodes ``[b, c1)``, ``[c1, c2)``, ..., ``[ck, len(T.turns))``. Node ``[ci-1, ci)`` of ``T``
has as children ``T``'s next node and the first node of every child forked at ``ci``;
``T`` *owns* its nodes (its row trains their tokens, a child's row leaves them masked).
This is how TreeRL's own code cuts its entropy-guided trees into segments
(``build_into_tree_format`` in THUDM/TreeRL), with turns where it has tokens.

Values and advantages, for a node ``n`` with the set ``L(n)`` of leaves under it::

    V(n)  = mean reward of L(n)
    A(n)  = (V(n) - V(root)) + (V(n) - V(parent(n)))        "treerl"
    A(n)  = A(n) / sqrt(|L(n)|)                              "treerl_sqrt"

``V(n) - V(root)`` is TreeRL's global advantage, ``V(n) - V(parent(n))`` its local one
and ``/ sqrt(|L(n)|)`` its re-weighting of nodes shared by many leaves (TreeRL's reward of
a step, ``R(s_n)``). ``root`` is a virtual node over every tree of a GRPO group (TreeRL's
root over its trees), so ``V(root)`` is the group's mean leaf reward; with one tree per
group (``envhub rollout --tree``) a tree's first node gets advantage 0: every leaf shares
it, and no comparison within the group can credit it. Rewards are used as they are (no
division by the group's std, as in TreeRL).

Two differences from TreeRL, both stated in docs/training.md: TreeRL trains every leaf's
whole path, so a node's tokens enter the loss ``|L(n)|`` times, each weighted by
``R(s_n)``; envhub trains each token once (in its owner's row), with ``A(n)``. And a
trajectory of the group that is not part of a tree counts as a tree of one node.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from envhub.errors import InvalidRequest
from envhub.trainers.token_rows import TokenRow
from envhub.trajectory import Trajectory

__all__ = [
    "TREE_ESTIMATORS",
    "TreeEstimator",
    "TreeNode",
    "batch_turn_advantages",
    "broken_trees",
    "row_token_advantages",
    "tree_nodes",
    "turn_advantages",
]

TreeEstimator = Literal["treerl", "treerl_sqrt"]
TREE_ESTIMATORS: tuple[TreeEstimator, ...] = ("treerl", "treerl_sqrt")


@dataclass(frozen=True)
class TreeNode:
    """One segment of turns of a tree: ``trajectory.turns[start:end]`` of its owner, the
    ``leaves`` under it, their mean reward ``value`` and the node's ``advantage``.
    ``parent`` is the index of the parent node in the list :func:`tree_nodes` returns
    (``None``: a tree's first node, whose parent is the group's virtual root)."""

    trajectory_id: str
    start: int
    end: int
    leaves: int
    value: float
    advantage: float
    parent: int | None


def _check(trajectories: Sequence[Trajectory]) -> None:
    if any(t.masked or t.reward is None for t in trajectories):
        raise InvalidRequest("tree advantages need scored leaves: drop masked trees first")


def tree_nodes(
    trajectories: Sequence[Trajectory], estimator: TreeEstimator = "treerl"
) -> list[TreeNode]:
    """The nodes of one GRPO group's trees, each tree's parents before their children.

    ``trajectories`` are the scored leaves of one group, every tree whole (each
    ``parent_id`` among them); a trajectory without ``tree_id`` is a tree of one node.
    Raises :class:`~envhub.errors.InvalidRequest` for a malformed tree (a parent missing,
    a branch turn outside the parent's turns).
    """
    if estimator not in TREE_ESTIMATORS:
        raise InvalidRequest(f"unknown tree estimator {estimator!r}; use one of {TREE_ESTIMATORS}")
    _check(trajectories)
    by_id = {t.trajectory_id: t for t in trajectories}
    children: dict[str, dict[int, list[Trajectory]]] = defaultdict(lambda: defaultdict(list))
    roots = []
    for t in trajectories:
        if t.parent_id is None:
            roots.append(t)
            continue
        parent = by_id.get(t.parent_id)
        if parent is None:
            raise InvalidRequest(f"trajectory {t.trajectory_id}: its parent is not in the batch")
        cut = t.branch_turn or 0
        if not (parent.branch_turn or 0) <= cut <= len(parent.turns):
            raise InvalidRequest(
                f"trajectory {t.trajectory_id}: branch turn {cut} is outside its parent's turns"
            )
        children[t.parent_id][cut].append(t)

    def leaf_sums(t: Trajectory) -> list[tuple[float, int]]:
        """(reward sum, leaf count) under each node of ``t``, first node first."""
        cuts = sorted(children[t.trajectory_id])
        totals = [(t.reward or 0.0, 1)]  # the last node: t alone
        for cut in reversed(cuts):
            total, count = totals[0]
            for child in children[t.trajectory_id][cut]:
                child_total, child_count = leaf_sums(child)[0]
                total, count = total + child_total, count + child_count
            totals.insert(0, (total, count))
        return totals

    rewards = [t.reward or 0.0 for t in trajectories]
    root_value = sum(rewards) / len(rewards)
    nodes: list[TreeNode] = []

    def add(t: Trajectory, parent: int | None, parent_value: float) -> None:
        cuts = sorted(children[t.trajectory_id])
        bounds = [t.branch_turn or 0, *cuts, len(t.turns)]
        for i, (total, count) in enumerate(leaf_sums(t)):
            value = total / count
            advantage = (value - root_value) + (value - parent_value)
            if estimator == "treerl_sqrt":
                advantage /= math.sqrt(count)
            nodes.append(
                TreeNode(t.trajectory_id, bounds[i], bounds[i + 1], count, value, advantage, parent)
            )
            parent, parent_value = len(nodes) - 1, value
            if i < len(cuts):
                for child in children[t.trajectory_id][cuts[i]]:
                    add(child, parent, value)

    for root in roots:
        add(root, None, root_value)
    return nodes


def turn_advantages(
    trajectories: Sequence[Trajectory], estimator: TreeEstimator = "treerl"
) -> dict[str, list[float]]:
    """Per trajectory of one group, the advantage of each of its turns: that of the node
    the turn belongs to (0.0 on the turns it shares with its parent, which it does not
    own and does not train)."""
    out = {t.trajectory_id: [0.0] * len(t.turns) for t in trajectories}
    for node in tree_nodes(trajectories, estimator):
        out[node.trajectory_id][node.start : node.end] = [node.advantage] * (node.end - node.start)
    return out


def row_token_advantages(row: TokenRow, per_turn: Sequence[float]) -> list[float]:
    """A row's per-token advantages: each trained span gets its turn's advantage, every
    other token 0."""
    advantages = [0.0] * len(row)
    for turn, start, end in row.spans:
        advantages[start:end] = [per_turn[turn]] * (end - start)
    return advantages


def broken_trees(trajectories: Sequence[Trajectory]) -> dict[str, str]:
    """The trees of a batch that get no tree advantages, by ``tree_id``, with the reason:
    ``masked_tree`` (a leaf is masked: the nodes above it would be valued over the leaves
    that happened not to fail, and a masked owner leaves its turns untrained) or
    ``incomplete_tree`` (fewer leaves than ``tree_size``, or a parent missing)."""
    members: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        if trajectory.tree_id is not None:
            members[trajectory.tree_id].append(trajectory)
    broken = {}
    for tree_id, tree in members.items():
        ids = {t.trajectory_id for t in tree}
        if any(t.masked or t.reward is None for t in tree):
            broken[tree_id] = "masked_tree"
        elif len(tree) != (tree[0].tree_size or 0) or any(
            t.parent_id is not None and t.parent_id not in ids for t in tree
        ):
            broken[tree_id] = "incomplete_tree"
    return broken


def batch_turn_advantages(
    trajectories: Sequence[Trajectory], estimator: TreeEstimator = "treerl"
) -> dict[str, list[float]]:
    """:func:`turn_advantages` for every GRPO group of a batch that holds a tree, by
    trajectory id. Trajectories of groups without trees, masked ones and the members of
    :func:`broken_trees` are left out (the first take the flat baseline, the others are
    not trained)."""
    broken = broken_trees(trajectories)
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        if not (t.masked or t.reward is None) and (t.tree_id or "") not in broken:
            groups[t.group_id].append(t)
    out: dict[str, list[float]] = {}
    for group in groups.values():
        if any(t.tree_id is not None for t in group):
            out.update(turn_advantages(group, estimator))
    return out

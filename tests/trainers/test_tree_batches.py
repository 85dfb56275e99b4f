"""Tree-aware GRPO batches (issue 33 item 4): TreeRL per-node advantages, shared-prefix
turns trained once, gold prefixes never trained, masked leaves, the flat path unchanged."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from typing import Any

import pytest

import envhub
from envhub.errors import InvalidRequest
from envhub.policies.reference import ReferencePolicy
from envhub.rollout import TreeConfig, make_branch_rule
from envhub.rollout.run import run
from envhub.trainers.grpo import build_batch
from envhub.trainers.tree_advantages import tree_nodes
from envhub.trajectory import Trajectory
from tests.trainers.factories import hand_tree, two_turn


def test_treerl_advantages_of_a_hand_built_tree() -> None:
    """Rewards R=1, A=0, B=1, C=0: V(root) = 0.5. R[1,2) holds {R, B}: V = 1, global +0.5,
    local +0.5 (its parent R[0,1) is worth 0.5) -> 1.0; R[2,3) = {R}: +0.5 + 0 = 0.5;
    A[1,2) = {A, C}: -0.5 - 0.5 = -1.0; A[2,3) and C[2,3): -0.5 + 0 = -0.5."""
    tree = hand_tree()
    nodes = {(n.trajectory_id, n.start): n for n in tree_nodes(tree)}
    assert {k: (n.leaves, n.value, n.advantage) for k, n in nodes.items()} == {
        ("t-0", 0): (4, 0.5, 0.0),
        ("t-0", 1): (2, 1.0, 1.0),
        ("t-0", 2): (1, 1.0, 0.5),
        ("t-2", 2): (1, 1.0, 0.5),
        ("t-1", 1): (2, 0.0, -1.0),
        ("t-1", 2): (1, 0.0, -0.5),
        ("t-3", 2): (1, 0.0, -0.5),
    }
    sqrt = {(n.trajectory_id, n.start): n.advantage for n in tree_nodes(tree, "treerl_sqrt")}
    assert sqrt[("t-0", 1)] == pytest.approx(1 / math.sqrt(2))
    assert sqrt[("t-1", 1)] == pytest.approx(-1 / math.sqrt(2))

    batch = build_batch(tree, tree="treerl", return_tensors=None)
    rows = {
        row.trajectory_id: (row, adv) for row, adv in zip(batch.rows, batch.advantages, strict=True)
    }
    root_row, root_adv = rows["t-0"]
    # R trains all of its turns, each with its node's advantage (one row, three values)
    assert root_row.input_ids == [1, 2, 3, 10, 11, 91, 12, 13, 92, 14]
    assert root_adv[: len(root_row)] == [0, 0, 0, 0.0, 0.0, 0, 1.0, 1.0, 0, 0.5]
    # C shares R's first turn and A's second: only its own last turn is trained
    c_row, c_adv = rows["t-3"]
    assert c_row.input_ids == [1, 2, 3, 10, 11, 91, 30, 31, 92, 50, 51]
    assert c_row.loss_mask == [0] * 9 + [1, 1] and c_adv[: len(c_row)] == [0.0] * 9 + [-0.5] * 2
    assert c_row.prompt_length == 9  # the shared turns are its prompt now
    assert batch.row_advantages == [0.5, -0.5, 0.5, -0.5]  # each row's leaf node


def test_shared_tokens_are_trained_in_exactly_one_row() -> None:
    tree = hand_tree()
    trained: Counter[tuple[int, ...]] = Counter()
    for row in build_batch(tree, tree="treerl", return_tensors=None).rows:
        for _, _, end in row.spans:
            trained[tuple(row.input_ids[:end])] += 1  # a sampled span, with its context
    assert len(trained) == 7 and set(trained.values()) == {1}  # 7 nodes, once each
    # the flat baseline trains every leaf whole: R's first turn four times
    flat = Counter()
    for row in build_batch(tree, return_tensors=None).rows:
        flat.update(tuple(row.input_ids[:end]) for _, _, end in row.spans)
    assert flat[(1, 2, 3, 10, 11)] == 4


def test_flat_path_is_unchanged() -> None:
    """Without ``tree`` a tree's leaves are one GRPO group, trained whole; and ``tree``
    leaves groups without trees to the flat estimator, token for token."""
    tree = hand_tree()
    plain = [t.model_copy(update={"tree_id": None, "parent_id": None, "branch_turn": None})
             for t in tree]  # fmt: skip
    with_fields = build_batch(tree, return_tensors=None)
    without = build_batch(plain, return_tensors=None)
    assert with_fields.advantages == without.advantages
    assert with_fields.loss_mask == without.loss_mask
    groups = [two_turn("g", 0, 1.0), two_turn("g", 1, 0.0), two_turn("h", 0, 0.5),
              two_turn("h", 1, 0.0)]  # fmt: skip
    for estimator in ("grpo", "dr_grpo", "rloo"):
        flat = build_batch(groups, estimator=estimator)  # type: ignore[arg-type]
        treed = build_batch(groups, estimator=estimator, tree="treerl")  # type: ignore[arg-type]
        for name in ("input_ids", "loss_mask", "advantages", "old_logprobs"):
            assert getattr(flat, name).equal(getattr(treed, name))
        assert flat.row_advantages == treed.row_advantages


def test_gold_prefix_turns_are_never_trained() -> None:
    gold = two_turn("g", 0, 1.0).model_copy(update={"gold_prefix_turns": 1})
    batch = build_batch([gold, two_turn("g", 1, 0.0)], estimator="dr_grpo", return_tensors=None)
    row = batch.rows[0]
    assert row.loss_mask == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1]  # turn 0 replayed, not sampled
    assert row.policy_versions[3:5] == [-1, -1] and row.old_logprobs[3:5] == [0.0, 0.0]
    assert row.prompt_length == 7 and batch.advantages[0] == [0.0] * 7 + [0.5] * 3


def test_a_tree_with_a_masked_leaf_is_dropped_whole() -> None:
    """A failed leaf has no reward: the nodes above it would be valued over the leaves
    that happened not to fail, so the whole tree goes (the rollout reruns such trees on
    --resume); other groups are unaffected."""
    tree = hand_tree()
    tree[3] = tree[3].model_copy(update={"masked": True, "reward": None})
    other = hand_tree("u", (0, 1, 1, 0))
    batch = build_batch([*tree, *other], tree="treerl", return_tensors=None)
    assert batch.dropped == {"masked": 1, "masked_tree": 3}
    assert {row.group_id for row in batch.rows} == {"u"}
    assert batch.row_advantages == build_batch(other, tree="treerl").row_advantages
    # a tree missing a leaf (a partial batch) is dropped too, not valued over a part
    partial = build_batch(other[:3], tree="treerl", return_tensors=None)
    assert len(partial) == 0 and partial.dropped == {"incomplete_tree": 3}
    # the flat baseline keeps the other leaves as a group of three
    assert build_batch(tree, return_tensors=None).dropped == {"masked": 1}


def test_refusals() -> None:
    with pytest.raises(InvalidRequest, match="task_key"):
        build_batch(hand_tree(), tree="treerl", task_key="env")
    with pytest.raises(InvalidRequest, match="tree estimator"):
        tree_nodes(hand_tree(), "mcts")  # type: ignore[arg-type]
    bad = hand_tree()
    bad[2] = bad[2].model_copy(update={"branch_turn": 9})
    with pytest.raises(InvalidRequest, match="outside its parent"):
        build_batch(bad, tree="treerl")


# -- a real tree rollout ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def rollout_trees() -> list[Trajectory]:
    """Trees of calc episodes (reference policy, half its actions wrong: rewards vary),
    forked after turn 1 of every node, factor 2, depth 2."""
    env = envhub.make("calc", num_tasks=30)
    tree = TreeConfig(make_branch_rule("fixed:1"), factor=2, depth=2)
    result = asyncio.run(run(env, ReferencePolicy(wrong_action_p=0.5), "train[0:8]", tree=tree))
    assert result.trajectories is not None
    return list(result.trajectories)


def _oracle(group: list[Trajectory], owner: Trajectory, k: int) -> float:
    """TreeRL's advantage of turn ``k`` of ``owner``, from the definition: the leaves of
    a node are those that played the node's turns (the owner and the descendants forked
    from it after them); its parent node ends where it starts."""
    by_id = {t.trajectory_id: t for t in group}

    def path(leaf: Trajectory) -> list[tuple[str, int]]:  # (ancestor, turns shared with it)
        out, node = [], leaf
        while node.parent_id is not None:
            out.append((node.parent_id, node.branch_turn or 0))
            node = by_id[node.parent_id]
        return out

    def leaves(t: Trajectory, turn: int) -> list[float]:
        """Rewards of the leaves that share ``t``'s first ``turn + 1`` turns."""
        shared = [leaf for leaf in group if leaf is t or any(
            a == t.trajectory_id and at > turn for a, at in path(leaf))]  # fmt: skip
        return [leaf.reward or 0.0 for leaf in shared]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    value = mean(leaves(owner, k))
    cuts = sorted({c.branch_turn or 0 for c in group if c.parent_id == owner.trajectory_id})
    start = max([owner.branch_turn or 0, *(c for c in cuts if c <= k)])
    if start == 0:
        parent = mean([t.reward or 0.0 for t in group])  # the group's virtual root
    elif start > (owner.branch_turn or 0):
        parent = mean(leaves(owner, start - 1))
    else:
        parent = mean(leaves(by_id[owner.parent_id or ""], start - 1))
    return (value - mean([t.reward or 0.0 for t in group])) + (value - parent)


def test_a_real_tree_rollout_batches_exactly(
    rollout_trees: list[Trajectory], tokenizer: Any
) -> None:
    trees = rollout_trees
    assert len({t.tree_id for t in trees}) == 8 and max(t.tree_size or 0 for t in trees) == 3
    batch = build_batch(trees, tree="treerl", tokenizer=tokenizer, drop_zero_variance=False,
                        return_tensors=None)  # fmt: skip
    assert len(batch.rows) == len(trees) and not batch.dropped
    by_id = {t.trajectory_id: t for t in trees}
    trained: Counter[tuple[str, int]] = Counter()
    for row, advantages in zip(batch.rows, batch.advantages, strict=True):
        owner = by_id[row.trajectory_id]
        group = [t for t in trees if t.group_id == owner.group_id]
        assert sum(row.loss_mask[: row.prompt_length]) == 0
        for k, start, end in row.spans:
            assert advantages[start:end] == pytest.approx(
                [_oracle(group, owner, k)] * (end - start)
            )
            trained[(owner.trajectory_id, k)] += 1
    # every turn is trained once, in the row of the trajectory that played it
    expected = {
        (t.trajectory_id, k) for t in trees for k in range(t.branch_turn or 0, len(t.turns))
    }
    assert set(trained) == expected and set(trained.values()) == {1}
    # a child's shared turns, trained in its row by the flat baseline, are its prompt here
    flat = build_batch(trees, tokenizer=tokenizer, drop_zero_variance=False, return_tensors=None)
    flat_rows = {row.trajectory_id: row for row in flat.rows}
    children = [row for row in batch.rows if by_id[row.trajectory_id].parent_id is not None]
    assert children and all(
        sum(flat_rows[row.trajectory_id].loss_mask[: row.prompt_length]) > 0 for row in children
    )

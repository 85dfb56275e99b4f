"""Tree rollouts: fork a live episode at branch points and let every branch go on.

    tree = TreeConfig(make_branch_rule("fixed:2"), factor=3, depth=2, max_leaves=16)
    result = await envhub.rollout.run(env, policy, tasks="0:8", tree=tree, output="t.jsonl")

A tree starts from one task. Its root episode runs as any episode does
(:class:`~envhub.rollout.episode.EpisodeRunner`, the same turn loop); after each step that
did not end it, the runner's branch hook asks the tree's :class:`BranchRule` whether to
branch there. At a branch point the live session is forked
(:meth:`~envhub.protocol.SessionHandle.fork`) into ``factor - 1`` children and the parent
goes on too: ``factor`` continuations, each sampling its own next turns, each a task of
its own (:meth:`EpisodeRunner.run_fork`). A continuation may branch again, ``depth``
times along any path at most, and a fork that would take the tree past ``max_leaves``
episodes is not taken (that continuation simply goes on).

Counting: every record is a *leaf*, one whole episode from the root to its end. A *node*
is a segment of turns between branch points: the root's first segment is one, and each
branch point adds ``factor`` (the parent's continuation and its children). A full tree of
``depth`` d, factor m has m**d leaves and (m**(d+1) - 1) / (m - 1) nodes.

Branch rules (:func:`make_branch_rule`, :func:`register_branch_rule` for more):

- ``fixed:K``: after turn K of each node (turns K, 2K, ... of a path, ``depth`` times);
- ``every``: after every turn (``fixed:1``), bounded by ``depth`` and ``max_leaves``;
- ``entropy[:T]``: after a turn whose mean surprisal is at least T nats per token
  (default 0.5). The surprisal of a sampled token is ``-logprob`` as the model server
  returned it (:attr:`~envhub.trajectory.Turn.completion_logprobs`); its mean over the
  turn's sampled tokens is a one-sample estimate of the policy's per-token entropy along
  that path (E[-log p(x)] = H for x drawn from p), so it finds the turns where the
  policy was unsure of what it wrote, without asking the server for full distributions.
  A turn without logprobs never branches (ask for them: ``--token-ids on``).

A tree's episodes share no retry: a node whose environment fails is masked at once (a
fresh session would not hold the prefix its children share), and ``--resume`` runs
every tree with a masked or missing episode again, as a whole.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from envhub.errors import InvalidRequest
from envhub.protocol import SessionHandle
from envhub.rollout.episode import EpisodeRecord, EpisodeRunner, EpisodeSpec
from envhub.runtime.cleanup import abort_quietly
from envhub.trajectory import Trajectory, Turn
from envhub.types import MAX_FORK

__all__ = [
    "BRANCH_RULES",
    "BranchRule",
    "EntropyRule",
    "FixedRule",
    "TreeConfig",
    "TreeRunner",
    "make_branch_rule",
    "register_branch_rule",
    "surprisal",
]

DEFAULT_ENTROPY_THRESHOLD = 0.5


def surprisal(turn: Turn) -> float | None:
    """Mean surprisal (``-logprob``, nats) of a turn's sampled tokens; ``None`` without
    logprobs."""
    logprobs = turn.completion_logprobs
    if not logprobs:
        return None
    return -sum(logprobs) / len(logprobs)


class BranchRule(Protocol):
    """Whether to branch after the last of ``turns`` (the path so far; ``since``: index
    of the current node's first turn). Asked after each step that did not end the
    episode, while the node may still branch (depth and budget allow it)."""

    @property
    def name(self) -> str: ...

    def branches(self, turns: Sequence[Turn], since: int) -> bool: ...


@dataclass(frozen=True)
class FixedRule:
    """Branch once a node has played ``k`` turns (``every`` is ``k=1``)."""

    k: int
    name: str = "fixed"

    def branches(self, turns: Sequence[Turn], since: int) -> bool:
        return len(turns) - since >= self.k


@dataclass(frozen=True)
class EntropyRule:
    """Branch after a turn whose mean surprisal (:func:`surprisal`) is at least
    ``threshold`` nats per token."""

    threshold: float = DEFAULT_ENTROPY_THRESHOLD
    name: str = "entropy"

    def branches(self, turns: Sequence[Turn], since: int) -> bool:
        value = surprisal(turns[-1]) if turns else None
        return value is not None and value >= self.threshold


def _fixed(argument: str | None) -> BranchRule:
    try:
        k = int(argument or "")
    except ValueError:
        k = 0
    if k < 1:
        raise InvalidRequest(f"fixed:K needs a turn count K >= 1, not {argument!r}")
    return FixedRule(k)


def _every(argument: str | None) -> BranchRule:
    if argument is not None:
        raise InvalidRequest("every takes no argument")
    return FixedRule(1, name="every")


def _entropy(argument: str | None) -> BranchRule:
    if argument is None:
        return EntropyRule()
    try:
        threshold = float(argument)
    except ValueError:
        threshold = -1.0
    if not threshold >= 0:  # also refuses nan
        raise InvalidRequest(
            f"entropy:T needs a threshold T >= 0 (nats per token), not {argument!r}"
        )
    return EntropyRule(threshold)


BRANCH_RULES: dict[str, Callable[[str | None], BranchRule]] = {
    "fixed": _fixed,
    "every": _every,
    "entropy": _entropy,
}
"""Branch rules by name: a factory of the text after ``NAME:`` (``None`` without one)."""


def register_branch_rule(name: str, factory: Callable[[str | None], BranchRule]) -> None:
    """Make ``--branch-at NAME[:ARG]`` build a rule with ``factory(ARG)``."""
    BRANCH_RULES[name] = factory


def make_branch_rule(spec: str) -> BranchRule:
    """The rule a ``--branch-at`` value names: ``fixed:K``, ``every``, ``entropy[:T]``."""
    name, _, argument = spec.partition(":")
    factory = BRANCH_RULES.get(name)
    if factory is None:
        known = ", ".join(sorted(BRANCH_RULES))
        raise InvalidRequest(f"unknown branch rule {name!r}: use one of {known}")
    return factory(argument if _ else None)


@dataclass(frozen=True)
class TreeConfig:
    """How trees grow: ``rule`` picks branch points, each gives ``factor`` continuations
    (the parent and ``factor - 1`` forks), at most ``depth`` branch points along a path,
    at most ``max_leaves`` episodes per tree (``None``: ``factor ** depth``, the full
    tree)."""

    rule: BranchRule
    factor: int = 2
    depth: int = 1
    max_leaves: int | None = None

    @property
    def leaf_bound(self) -> int:
        """The most episodes a tree can have."""
        full = int(self.factor**self.depth)
        return full if self.max_leaves is None else min(full, self.max_leaves)

    def __post_init__(self) -> None:
        if not 2 <= self.factor <= MAX_FORK + 1:
            raise InvalidRequest(
                f"the branch factor must be in 2..{MAX_FORK + 1}, not {self.factor}"
            )
        if self.depth < 1:
            raise InvalidRequest(f"the tree depth must be >= 1, not {self.depth}")
        if self.max_leaves is not None and self.max_leaves < 1:
            raise InvalidRequest(f"a tree's leaf budget must be >= 1, not {self.max_leaves}")


@dataclass
class _Tree:
    """One tree as it grows: its leaf count, node indexes and running continuations."""

    spec: EpisodeSpec
    leaves: int = 1
    next_index: int = 1
    forks: list[asyncio.Task[Trajectory]] = field(default_factory=list)
    unstarted: dict[str, SessionHandle] = field(default_factory=dict)  # forks not yet playing


@dataclass
class _Node:
    """Where an episode of a tree stands: its tree, branch points passed, the first turn
    of its current node, and where it was forked from."""

    tree: _Tree
    index: int
    depth: int = 0
    since: int = 0
    parent_id: str | None = None
    branch_turn: int | None = None
    branch_message: int | None = None


class TreeRunner:
    """Runs whole trees with an :class:`EpisodeRunner` (which it owns from here on: it
    sets the runner's branch hook and turns its episode retries off, see the module
    docstring). :meth:`run` returns a tree's episodes, root first, each parent before
    its children, with their tree fields set."""

    def __init__(self, runner: EpisodeRunner, config: TreeConfig) -> None:
        self.runner = runner
        self.config = config
        runner.branch = self._branch
        runner.max_env_attempts = 1
        self._nodes: dict[str, _Node] = {}

    async def run(self, spec: EpisodeSpec) -> list[Trajectory]:
        tree = _Tree(spec)
        root_id = uuid.uuid4().hex
        self._nodes[root_id] = _Node(tree, 0)
        try:
            episodes = [await self.runner.run(spec, trajectory_id=root_id)]
            waited = 0
            while waited < len(tree.forks):  # a fork's own forks join the list as it runs
                episodes.append(await tree.forks[waited])
                waited += 1
        except BaseException:
            for task in tree.forks:
                task.cancel()
            await asyncio.gather(*tree.forks, return_exceptions=True)
            for session in tree.unstarted.values():  # cancelled before they ran: free them
                await abort_quietly(session, "tree rollout abort")
            raise
        finally:
            members = {t: node for t, node in self._nodes.items() if node.tree is tree}
            for trajectory_id in members:
                del self._nodes[trajectory_id]
        return sorted(
            (
                t.model_copy(update={
                    "sample_index": members[t.trajectory_id].index,
                    "tree_id": root_id,
                    "parent_id": members[t.trajectory_id].parent_id,
                    "branch_turn": members[t.trajectory_id].branch_turn,
                    "branch_message": members[t.trajectory_id].branch_message,
                    "tree_size": len(episodes),
                })
                for t in episodes
            ),
            key=lambda t: t.sample_index,
        )  # fmt: skip

    async def _branch(
        self, spec: EpisodeSpec, record: EpisodeRecord, session: SessionHandle
    ) -> None:
        """The runner's branch hook: fork ``session`` here when the rule, the depth and
        the tree's budget say so."""
        node = self._nodes.get(record.trajectory_id)
        config = self.config
        if node is None or node.depth >= config.depth:
            return
        if not config.rule.branches(record.turns, node.since):
            return
        tree = node.tree
        children = config.factor - 1
        if config.max_leaves is not None and tree.leaves + children > config.max_leaves:
            return  # over budget: not taken, the episode goes on alone
        tree.leaves += children  # reserved before the fork's await: no sibling overspends
        try:
            forks = await session.fork(children)
        except BaseException:
            tree.leaves -= children
            raise
        node.depth += 1
        node.since = len(record.turns)
        for fork in forks:
            child_id = uuid.uuid4().hex
            index = tree.next_index
            tree.next_index += 1
            self._nodes[child_id] = _Node(
                tree, index, node.depth, node.since, record.trajectory_id,
                len(record.turns), len(record.messages),
            )  # fmt: skip
            child = record.branch(child_id, fork.served_by)
            tree.unstarted[child_id] = fork
            tree.forks.append(asyncio.ensure_future(
                self._play_fork(tree, EpisodeSpec(spec.task_id, index, spec.group_id), child, fork)
            ))  # fmt: skip

    async def _play_fork(
        self, tree: _Tree, spec: EpisodeSpec, record: EpisodeRecord, session: SessionHandle
    ) -> Trajectory:
        del tree.unstarted[record.trajectory_id]  # from here on the runner frees it
        return await self.runner.run_fork(spec, record, session)

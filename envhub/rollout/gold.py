"""Episodes that start from a gold prefix: restarts of tasks the policy never solved.

A spec with :attr:`~envhub.rollout.episode.EpisodeSpec.gold` (drawn by a plan with
:class:`~envhub.rollout.sampling.GoldRestarts`) starts at turn ``k`` of a replay of its
task's gold actions. The first episode of its group to start (the *leader*) opens a
session, replays the first ``k`` gold actions in it with the reference policy (the same
turn loop as any episode, so the gold turns are recorded as turns, without token ids:
nothing sampled them), forks the live session for the other ``members - 1`` episodes of
the group and plays on itself; each other member plays on from a fork. A group thus pays
for one replay, not one per episode (forks are cheap where the environment forks
natively: ``docs/forking.md``). The policy's first call sees the gold turns'
conversation and ``turn = k``, and every trajectory records ``gold_prefix_turns = k``
(trainers mask those turns).

Sharing saves work and never decides an outcome: a member that finds no fork (the
leader's replay failed for good, or the environment cannot fork) replays the prefix
itself. The leader is retried like any episode (the replay runs again); a member played
from a fork is masked on failure without a retry, as a tree's fork is.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from dataclasses import dataclass, field

from envhub.errors import EnvhubError, InvalidRequest
from envhub.policies import ReferencePolicy
from envhub.protocol import SessionHandle
from envhub.rollout.episode import (
    EpisodeRecord,
    EpisodeRunner,
    EpisodeSpec,
    PolicyLoop,
    TurnLoop,
)
from envhub.runtime.cleanup import abort_quietly
from envhub.trajectory import Trajectory
from envhub.types import MAX_FORK

__all__ = ["GoldPrefixRunner"]

_Fork = tuple[EpisodeRecord, SessionHandle]


@dataclass
class _Group:
    """The shared prefix of one gold group: the leader's forks, once it has them (an
    empty list: none, each member replays for itself)."""

    forks: asyncio.Future[list[_Fork]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class _GoldLoop:
    """The leader's turn loop: replay the gold prefix, share it, then ``inner`` plays on."""

    def __init__(self, owner: GoldPrefixRunner, inner: TurnLoop) -> None:
        self.owner = owner
        self.inner = inner
        self.replay = PolicyLoop()

    def check(self, policy: object) -> None:
        """The leader's policy was checked by the runner it copies."""

    async def play(
        self, runner: EpisodeRunner, spec: EpisodeSpec, record: EpisodeRecord,
        session: SessionHandle,
    ) -> str | None:  # fmt: skip
        assert spec.gold is not None
        replayer = copy.copy(runner)  # the same session, task lookup and metrics; no model
        replayer.policy = self.owner.reference
        replayer.max_turns = spec.gold.turns
        replayer.gate = replayer.branch = None
        replayer.policy_version = lambda: None
        if await self.replay.play(replayer, spec, record, session) is None:
            raise InvalidRequest(
                f"task {spec.task_id!r}: its gold actions ended the episode at turn "
                f"{len(record.turns)}, before the {spec.gold.turns} of the gold prefix: "
                "restart it with a shorter --gold-prefix"
            )
        await self.owner.share(spec, record, session)
        return await self.inner.play(runner, spec, record, session)


class GoldPrefixRunner:
    """Runs a plan's specs with an :class:`EpisodeRunner`: from scratch, or from a gold
    prefix shared by the members of its group (module docstring). :meth:`release` frees
    the forks that no member took (a stopped run's)."""

    def __init__(self, runner: EpisodeRunner) -> None:
        self.runner = runner
        self.reference = ReferencePolicy()
        self.leader = copy.copy(runner)
        self.leader.turn_loop = _GoldLoop(self, runner.turn_loop)
        self._groups: dict[str, _Group] = {}

    async def run(self, spec: EpisodeSpec) -> Trajectory:
        gold = spec.gold
        if gold is None:
            return await self.runner.run(spec)
        group = self._groups.get(spec.group_id)
        if group is None or (group.forks.done() and not group.forks.result()):
            trajectory = await self._lead(spec)
        else:
            forks = await group.forks
            if forks:
                record, session = forks.pop()
                trajectory = await self.runner.run_fork(spec, record, session)
            else:
                trajectory = await self._lead(spec)
        return trajectory.model_copy(update={"gold_prefix_turns": gold.turns})

    async def _lead(self, spec: EpisodeSpec) -> Trajectory:
        """Replay the prefix (and share it when the group's other members still wait)."""
        assert spec.gold is not None
        group = None
        if spec.gold.members > 1 and spec.group_id not in self._groups:
            group = self._groups[spec.group_id] = _Group()
        try:
            return await self.leader.run(spec)
        finally:
            if group is not None and not group.forks.done():
                group.forks.set_result([])  # no prefix to share: the others replay it

    async def share(self, spec: EpisodeSpec, record: EpisodeRecord, session: SessionHandle
                    ) -> None:  # fmt: skip
        """Fork the leader's ``session`` at the end of the gold prefix for the other
        members of its group (once; a group's later replays share nothing)."""
        group = self._groups.get(spec.group_id)
        if group is None or group.forks.done():
            return
        assert spec.gold is not None
        wanted = spec.gold.members - 1
        forks: list[SessionHandle] = []
        try:
            while len(forks) < wanted:
                forks += await session.fork(min(MAX_FORK, wanted - len(forks)))
        except EnvhubError:  # cannot fork (or not now): each member replays instead
            for fork in forks:
                await abort_quietly(fork, "gold prefix fork abandoned")
            forks = []
        group.forks.set_result(
            [(record.branch(uuid.uuid4().hex, fork.served_by), fork) for fork in forks]
        )

    async def release(self) -> None:
        """Abort the forks no member took, and forget every group."""
        groups, self._groups = self._groups, {}
        for group in groups.values():
            if group.forks.done():
                for _, session in group.forks.result():
                    await abort_quietly(session, "gold prefix fork unused")

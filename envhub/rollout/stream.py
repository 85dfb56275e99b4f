"""Streaming GRPO groups to a trainer loop, with back-pressure and bounded staleness.

    async with stream(env, policy, task_ids, group_size=8, batch_size=16,
                      max_staleness=1, overprovision=4) as rollouts:
        while training:
            groups = await rollouts.next_batch()      # the first 16 groups to complete
            train_on(groups)
            rollouts.policy_version += 1              # after each weight update

Each group is ``group_size`` episodes of one task (a sampling round), finished before it
is handed over. Completed groups wait in a bounded queue; when the trainer falls behind
the queue fills and no new group starts (back-pressure). ``policy_version`` is read at
every model call and recorded on each turn.

With ``max_staleness=k`` (AReaL), sampling runs at most ``k`` trainer steps ahead of the
trainer. A trainer step ends when the trainer asks for its next batch or sets
``policy_version`` (after a weight update; several sets in one step count once); ``done``
is the number of groups handed over in finished steps, and a group may start only while
``groups_started < done + (k + 1) * batch_size + overprovision``. A trainer that updates
once per batch gets AReaL's bound (no group is trained on more than ``k`` versions after
the version it started with); a trainer that skips an update (every group of a batch had
equal rewards) still ends its step by asking for the next batch, so the stream never waits
for a version that will not come. A consumer iterating group by group ends its steps by
setting ``policy_version`` (the same value ends a step without an update).
``overprovision`` (APRIL) starts extra groups beyond the batch; the batch takes whichever
groups complete first and the rest keep running for the next one, so one slow group does
not stall a batch (their turns record the older version they were sampled with).

Weight updates in flight: ``await rollouts.update_weights(version, sync=..., policy=...)``
holds new model calls, ends or aborts the ones in flight per ``policy`` (``finish``,
``abort-and-resume``, ``abort-and-drop``; :mod:`envhub.rollout.weights`), has ``sync`` (a
:class:`~envhub.policies.weight_sync.WeightSync`) load the version on the servers, then
sets ``policy_version`` and lets generation go on. The stream's
:class:`~envhub.policies.gate.GenerationGate` reaches each request of a policy that
supports it (:class:`~envhub.policies.gate.GateAware`: the openai and tito policies,
which resume partial completions) and each whole call of any other policy.

Curricula (:mod:`envhub.rollout.sampling`): the stream's ``sampler`` draws each group's
task when the group may start (default :class:`UniformSampler`: ``task_ids`` in order,
cycling, as a stream without one always did) and observes each finished group's scored
rewards; ``epochs`` bounds the draws to ``epochs * len(task_ids)``. A group a ``gate``
refuses (:class:`UniformRewardGate`: all rewards agree, DAPO) is dropped: not handed over,
not counted against the staleness bound, and the stream draws on, so an endless stream
fills every batch with groups that carry signal. :meth:`RolloutStream.state_dict` (the
sampler's state and the draws so far) goes into a trainer's checkpoint;
:meth:`RolloutStream.load_state_dict`, before the first group, continues the curriculum
(groups in flight when it was saved are not drawn again).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envhub.errors import InvalidRequest, StreamTimeout
from envhub.policies.base import Policy
from envhub.policies.gate import GateAware, GenerationDropped, GenerationGate
from envhub.policies.weight_sync import NoopSync, WeightSync
from envhub.protocol import EnvironmentClient
from envhub.rewards.judge import GroupRanker
from envhub.rollout.compaction import CompactionConfig, check_combination
from envhub.rollout.dispatcher import group_id
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.rollout.groups import GroupScoring
from envhub.rollout.sampling import Gate, Sampler, UniformSampler, make_sampler
from envhub.rollout.tree import TreeConfig, TreeRunner
from envhub.rollout.weights import UpdatePolicy, WeightUpdate, apply_update
from envhub.trajectory import Trajectory

__all__ = ["Group", "RolloutStream", "stream"]


@dataclass(frozen=True, slots=True)
class Group:
    """One GRPO group; ``masked`` trajectories (infra failures) must not be trained on."""

    group_id: str
    task_id: str
    round: int
    start_version: int
    trajectories: list[Trajectory]

    @property
    def scored(self) -> list[Trajectory]:
        return [t for t in self.trajectories if not t.masked]


class RolloutStream:
    """The object behind :func:`stream`; iterate it, or call :meth:`next_batch`."""

    def __init__(
        self,
        runner: EpisodeRunner,
        task_ids: list[str],
        *,
        group_size: int,
        batch_size: int,
        concurrency: int,
        max_staleness: int | None,
        overprovision: int,
        queue_size: int | None,
        policy_version: int,
        epochs: int | None,
        sampler: Sampler | None = None,
        gates: Sequence[Gate] = (),
        tree: TreeConfig | None = None,
        group_judge: GroupRanker | GroupScoring | None = None,
    ) -> None:
        if not task_ids:
            raise InvalidRequest("stream needs at least one task")
        if group_size < 1 or batch_size < 1 or concurrency < 1:
            raise InvalidRequest("group_size, batch_size and concurrency must be >= 1")
        if tree is not None and group_size != 1:
            raise InvalidRequest("a tree is its own group: group_size must be 1 with tree")
        if gates and group_size < 2 and tree is None:
            raise InvalidRequest("dropping groups whose rewards agree needs a group size >= 2")
        self.runner = runner
        self.trees = None if tree is None else TreeRunner(runner, tree)
        self.group_scoring = None if group_judge is None else GroupScoring.of(group_judge)
        runner.policy_version = lambda: self.policy_version
        self.group_size = group_size
        self.batch_size = batch_size
        self.max_staleness = max_staleness
        self.overprovision = max(0, overprovision)
        self.initial_version = policy_version
        self._version = policy_version
        self.groups_started = 0
        self.groups_in_flight = 0
        self._handed_over = 0  # groups returned to the trainer
        self._steps_done_groups = 0  # of those, the groups of finished trainer steps
        self._partial: list[Group] = []  # collected by a next_batch that timed out
        self._max_groups_in_flight = max(1, concurrency // group_size) + self.overprovision
        self._episodes = asyncio.Semaphore(concurrency)
        self._queue: asyncio.Queue[Group | None] = asyncio.Queue(queue_size or 2 * batch_size)
        self._changed = asyncio.Condition()
        self.sampler = sampler or UniformSampler(task_ids)
        self.gates = list(gates)
        self._max_draws = None if epochs is None else epochs * len(task_ids)
        self._rounds: Counter[str] = Counter()  # groups drawn per task
        self.groups_dropped = 0  # refused by a gate
        self._groups: set[asyncio.Task[None]] = set()
        self._producer: asyncio.Task[None] | None = None
        self._finished = False
        self._error: BaseException | None = None
        self.metrics = runner.metrics
        if self.metrics is not None:
            self.metrics.watch_queue("groups", self._queue.qsize)
        self.gate = GenerationGate(lambda: self._version)
        runner.gate = self.gate
        if isinstance(runner.policy, GateAware):
            runner.policy.attach_gate(self.gate)
        self._updating = asyncio.Lock()
        self.episodes_dropped = 0  # discarded by abort-and-drop updates (and run again)

    # -- the trainer's side ----------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        """Set after a weight update; ends the trainer step, which releases groups held
        back by the staleness bound."""
        self._version = version
        self._end_step()

    async def next_batch(
        self, size: int | None = None, *, timeout: float | None = None
    ) -> list[Group]:
        """The next ``size`` (default ``batch_size``) completed groups; fewer only at the end.

        Asking ends the trainer step of the previous batch (see the module docstring).
        ``timeout`` (seconds) raises :class:`~envhub.errors.StreamTimeout` when the batch
        is not whole by then; the groups collected so far are kept for the next call."""
        want = size or self.batch_size
        if self.max_staleness is not None and want > self._ahead():
            raise InvalidRequest(f"a batch of {want} groups exceeds the staleness bound")
        self._end_step()
        filling = asyncio.ensure_future(self._fill(want))
        try:
            done, _ = await asyncio.wait({filling}, timeout=timeout)
        finally:
            if not filling.done():  # timed out, or the caller was cancelled
                filling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await filling
        if not done:
            raise StreamTimeout(
                f"{len(self._partial)} of {want} groups completed within {timeout}s "
                f"({self.groups_in_flight} running, {self.groups_started} started); "
                "the collected groups are kept for the next call"
            )
        filling.result()  # the stream's own error, if it failed
        batch, self._partial = self._partial[:want], self._partial[want:]
        self._handed_over += len(batch)
        return batch

    async def _fill(self, want: int) -> None:
        """Collect completed groups into ``_partial`` (kept if cancelled) up to ``want``."""
        while len(self._partial) < want:
            group = await self._next()
            if group is None:
                break
            self._partial.append(group)

    async def update_weights(
        self,
        version: int,
        *,
        sync: WeightSync | None = None,
        policy: UpdatePolicy = "finish",
        abort_grace_s: float = 10.0,
    ) -> WeightUpdate:
        """Put weight ``version`` on the inference servers while the stream runs (see the
        module docstring; ``sync`` defaults to :class:`NoopSync`: the trainer updated the
        servers itself). No model call starts until it returns; on success
        ``policy_version`` is ``version``. Raises
        :class:`~envhub.errors.WeightUpdateFailed` when the servers did not take it: the
        stream goes on with the old version. Updates do not overlap (a second waits)."""
        async with self._updating:
            return await apply_update(
                self.gate,
                sync or NoopSync(),
                version,
                policy,
                abort_grace_s=abort_grace_s,
                loaded=lambda v: setattr(self, "policy_version", v),
            )

    def __aiter__(self) -> AsyncIterator[Group]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Group]:
        while self._partial:
            self._handed_over += 1
            yield self._partial.pop(0)
        while (group := await self._next()) is not None:
            self._handed_over += 1
            yield group

    async def _next(self) -> Group | None:
        if self._finished:
            return None
        self._ensure_started()
        if self._error is not None and self._queue.empty():
            self._finished = True
            raise self._error
        group = await self._queue.get()
        if group is not None and self.metrics is not None:
            self.metrics.group_handed_over(group.start_version, self._version)
        if group is None:
            self._finished = True
            if self._error is not None:
                raise self._error
        return group

    # -- the curriculum's state --------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state and the groups drawn so far (JSON-safe), for a checkpoint."""
        return {"sampler": self.sampler.state_dict(), "rounds": dict(self._rounds)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the curriculum of :meth:`state_dict`; only before the first group."""
        if self._producer is not None:
            raise InvalidRequest("load the stream's state before its first group")
        self.sampler.load_state_dict(state["sampler"])
        self._rounds = Counter({str(k): int(v) for k, v in state["rounds"].items()})

    # -- production ------------------------------------------------------------------

    def _may_start(self) -> bool:
        if self.groups_in_flight >= self._max_groups_in_flight:
            return False
        if self.max_staleness is None:
            return True
        started = self.groups_started - self.groups_dropped  # dropped ones never count
        return started < self._steps_done_groups + self._ahead()

    def _ahead(self) -> int:
        """How many groups past the finished trainer steps may start."""
        return ((self.max_staleness or 0) + 1) * self.batch_size + self.overprovision

    def _end_step(self) -> None:
        if self._steps_done_groups != self._handed_over:
            self._steps_done_groups = self._handed_over
            self._notify()

    def _ensure_started(self) -> None:
        if self._producer is None:
            if self.metrics is not None:
                self.metrics.start(self.runner.policy)
            self._producer = asyncio.get_running_loop().create_task(self._produce())

    def _notify(self) -> None:
        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        if self._producer is not None:
            asyncio.get_running_loop().create_task(notify())

    async def _produce(self) -> None:
        try:
            while self._max_draws is None or self._rounds.total() < self._max_draws:
                async with self._changed:
                    await self._changed.wait_for(self._may_start)
                task_id = self.sampler.draw()  # now: it sees every group finished so far
                round_index = self._rounds[task_id]
                self._rounds[task_id] += 1
                self.groups_started += 1
                self.groups_in_flight += 1
                task = asyncio.get_running_loop().create_task(self._run_group(round_index, task_id))
                self._groups.add(task)
                task.add_done_callback(self._group_done)
            while self._groups:
                await asyncio.gather(*list(self._groups))
        except asyncio.CancelledError:
            if self._error is None:
                raise  # closed by aclose(): nobody reads the queue any more
            for task in list(self._groups):
                task.cancel()
        await self._queue.put(None)  # end of stream, after the groups already queued

    def _group_done(self, task: asyncio.Task[None]) -> None:
        self._groups.discard(task)
        if not task.cancelled() and task.exception() is not None and self._error is None:
            self._error = task.exception()  # a bug, not an episode failure: stop and surface it
            if self._producer is not None:
                self._producer.cancel()

    async def _run_group(self, round_index: int, task_id: str) -> None:
        start_version = self._version
        gid = group_id(task_id, round_index)
        if self.metrics is not None:
            self.metrics.episodes_queued(self.group_size)

        async def one(index: int) -> list[Trajectory]:
            spec = EpisodeSpec(task_id, index, gid)
            while True:
                async with self._episodes:
                    try:
                        if self.trees is not None:
                            return await self.trees.run(spec)
                        return [await self.runner.run(spec)]
                    except GenerationDropped:  # an abort-and-drop update: run it again
                        self.episodes_dropped += 1

        runs = await asyncio.gather(*(one(i) for i in range(self.group_size)))
        members = [t for r in runs for t in r]
        if self.group_scoring is not None:  # ranked whole, before the sampler and gates
            members = await self.group_scoring.scored(members)
        group = Group(gid, task_id, round_index, start_version, members)
        rewards = [t.reward for t in group.scored if t.reward is not None]
        self.sampler.observe(task_id, rewards)
        if all(gate.admit(task_id, rewards) for gate in self.gates):
            await self._queue.put(group)
        else:
            self.groups_dropped += 1
        self.groups_in_flight -= 1
        async with self._changed:
            self._changed.notify_all()

    async def aclose(self) -> None:
        """Stop producing and cancel running episodes (their sessions are aborted)."""
        tasks = [t for t in (self._producer, *self._groups) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._finished = True
        if isinstance(self.runner.policy, GateAware):
            self.runner.policy.attach_gate(None)
        if self.metrics is not None:
            # shutting the HTTP server down waits for its poll loop: not on the event loop
            await asyncio.to_thread(self.metrics.stop)

    async def __aenter__(self) -> RolloutStream:
        self._ensure_started()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def stream(
    env: EnvironmentClient,
    policy: Policy,
    task_ids: list[str],
    *,
    env_version: str | None = None,
    group_size: int = 8,
    batch_size: int = 16,
    concurrency: int = 256,
    max_staleness: int | None = None,
    overprovision: int = 0,
    queue_size: int | None = None,
    policy_version: int = 0,
    epochs: int | None = None,
    sampler: str | Sampler | None = None,
    sampler_seed: int = 0,
    gates: Sequence[Gate] = (),
    max_turns: int | None = None,
    max_env_attempts: int = 3,
    sampling: dict[str, object] | None = None,
    tasks_from: EnvironmentClient | None = None,
    metrics_port: int | None = None,
    tree: TreeConfig | None = None,
    compaction: CompactionConfig | None = None,
    group_judge: GroupRanker | GroupScoring | None = None,
) -> RolloutStream:
    """Groups of ``group_size`` episodes per task, cycling over ``task_ids`` (``epochs``
    times, or forever), delivered in completion order. Use as ``async with``.
    ``env_version`` (recorded on each trajectory) defaults to the environment's
    ``info()``, which also gives the pins each trajectory records (distribution, its
    version, the task set's hash: :class:`~envhub.trajectory.EnvRef`). ``env`` may be
    any client, a pool or a Ray fleet included
    (:class:`envhub.fleet.FleetEnvironment`); ``tasks_from``: see
    :func:`envhub.rollout.run`. ``metrics_port``: Prometheus metrics on
    ``127.0.0.1:PORT/metrics`` from the first group until the stream is closed
    (:mod:`envhub.rollout.metrics`; ``group_staleness`` is measured when the trainer
    takes a group off the completed queue). ``sampler`` (``"uniform"``, ``"adaptive"``
    seeded by ``sampler_seed``, or a :class:`~envhub.rollout.sampling.Sampler`) and
    ``gates``: the curriculum (module docstring). ``tree``
    (:class:`~envhub.rollout.tree.TreeConfig`, with ``group_size=1``): each group is
    one tree of the task (:mod:`envhub.rollout.tree`), its episodes the tree's leaves,
    whole trajectories with their tree fields; ``concurrency`` counts trees.
    ``compaction``: compact long episodes' contexts, as in :func:`envhub.rollout.run`
    (the summaries go through the stream's weight gate; not combined with ``tree``).
    ``group_judge``: each group is ranked in one request once its episodes have ended,
    before it is handed over (:mod:`envhub.rollout.groups`; a judge failure masks its
    members with ``judge_error``)."""
    check_combination(compaction, tree=tree is not None, gold_restarts=False, turn_loop=False)
    metrics = None
    if metrics_port is not None:  # imported here: prometheus_client only when asked for
        from envhub.rollout.metrics import RolloutMetrics

        metrics = RolloutMetrics(metrics_port)
    runner = EpisodeRunner(
        env,
        policy,
        env_version=env_version,
        sampling=sampling,
        max_turns=max_turns,
        max_env_attempts=max_env_attempts,
        tasks_from=tasks_from,
        metrics=metrics,
        compaction=compaction,
    )
    return RolloutStream(
        runner,
        list(task_ids),
        group_size=group_size,
        batch_size=batch_size,
        concurrency=concurrency,
        max_staleness=max_staleness,
        overprovision=overprovision,
        queue_size=queue_size,
        policy_version=policy_version,
        epochs=epochs,
        sampler=make_sampler(sampler, task_ids, seed=sampler_seed)
        if isinstance(sampler, str)
        else sampler,
        gates=gates,
        tree=tree,
        group_judge=group_judge,
    )

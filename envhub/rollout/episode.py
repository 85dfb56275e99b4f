"""One episode: policy and environment session in a loop, recorded as a :class:`Trajectory`.

The environment is any :class:`~envhub.protocol.EnvironmentClient` (in-process, HTTP,
WebSocket, ...), so this loop is transport-agnostic. Failures are sorted here: an
environment/sandbox/transport error retries the whole episode on a fresh session up to
``max_env_attempts`` times, a model
error (after the policy's own retries) ends it at once, and either way the episode is
written ``masked`` with the error, never scored zero. Episode retries back off
exponentially with jitter, like model retries, so a restarting server is not stampeded.

A conversation that outgrows the model's context is not a failure once the model has
taken a turn: its own turns made it long, so the episode ends there with ``stop_reason
"context_length"`` and is scored like one cut at ``max_turns``. A first prompt that does
not fit is a configuration problem (context, ``max_tokens``, task size): masked.

An environment may answer a final answer with a user turn (``StepResult.user_messages``,
:meth:`~envhub.Environment.next_user_turn`): the user messages follow the step's
observations in the conversation and the episode goes on; a tool list the step changed
(``StepResult.tools``) is what the next model calls are offered, recorded on the first
turn that saw it (:attr:`~envhub.trajectory.Turn.tools`). A step's reward for the turn
(``StepResult.turn_reward``, :meth:`~envhub.Environment.turn_reward`) is recorded on the
turn whose model call led to it (:attr:`~envhub.trajectory.Turn.reward`).

What plays the turns is the runner's :class:`TurnLoop`: :class:`PolicyLoop` (the policy
and the session in alternation) by default, :class:`envhub.agents.AgentLoop` for an
external agent framework, or any object with the protocol's two methods. The runner owns
the rest (session, retries, masking, the trajectory's shared fields), so every loop gets
``--resume``, the circuit breaker and the summary.

Context compaction (:mod:`envhub.rollout.compaction`, the runner's ``compaction``) is a
step of :class:`PolicyLoop`: before a model call, once the context passed the threshold,
the strategy replaces it and the loop records a :class:`~envhub.trajectory.Compaction`;
the call and the later ones of that segment are fed the new context.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from envhub.errors import ContextLengthExceeded, EnvhubError, JudgeError, PolicyError
from envhub.policies.base import (
    Completion,
    GenerateRequest,
    Policy,
    SamplingParams,
    end_episode,
)
from envhub.policies.gate import (
    GateAware,
    GenerationAborted,
    GenerationDropped,
    GenerationGate,
)
from envhub.policies.retry import RetryPolicy
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.rollout.compaction import CompactionConfig, CompactionRequest
from envhub.runtime.cleanup import abort_quietly
from envhub.task import Task
from envhub.trajectory import (
    Compaction,
    EnvRef,
    ErrorInfo,
    SessionCall,
    Timings,
    Trajectory,
    TrajectoryMetrics,
    Turn,
    Usage,
)
from envhub.types import CloseResult, Message

if TYPE_CHECKING:
    from envhub.rollout.metrics import RolloutMetrics

__all__ = [
    "BranchHook",
    "EpisodeRecord",
    "EpisodeRunner",
    "EpisodeSpec",
    "GoldStart",
    "ModelFailure",
    "PolicyLoop",
    "TurnLoop",
    "record_turn",
]


@dataclass(frozen=True, slots=True)
class GoldStart:
    """Start an episode at turn ``turns`` of a replay of its task's gold actions; the
    ``members`` episodes of its group dispatched together share one replay
    (:mod:`envhub.rollout.gold`)."""

    turns: int
    members: int


@dataclass(frozen=True, slots=True)
class EpisodeSpec:
    """Which episode to run: sample ``sample_index`` of ``task_id`` in GRPO group
    ``group_id``, from scratch or (``gold``) from a gold prefix."""

    task_id: str
    sample_index: int
    group_id: str
    gold: GoldStart | None = None


class ModelFailure(Exception):
    """Raised by a :class:`TurnLoop` for a model error (its ``__cause__``: the policy's
    or model server's error, after their own retries): the runner ends the episode at
    once, masked with ``stop_reason="model_error"``, without an episode retry. It never
    leaves the runner."""


@dataclass
class EpisodeRecord:
    """What one attempt has gathered so far (kept when the attempt fails, for the mask).
    A :class:`TurnLoop` finds the session's opening ``messages`` and ``tools`` here and
    adds the episode's turns (:func:`record_turn`), messages and timings."""

    trajectory_id: str
    retried_errors: dict[str, int]
    served_by: str | None = None
    messages: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    session_calls: list[SessionCall] | None = None  # an external agent's: the session's log
    compactions: list[Compaction] = field(default_factory=list)
    llm_s: float = 0.0
    env_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def branch(self, trajectory_id: str, served_by: str | None) -> EpisodeRecord:
        """A copy of this record for an episode forked from it here (its own lists, no
        retries yet), under ``trajectory_id`` on ``served_by``."""
        return EpisodeRecord(
            trajectory_id, {}, served_by=served_by, messages=list(self.messages),
            tools=list(self.tools), turns=list(self.turns),
            compactions=list(self.compactions), llm_s=self.llm_s,
            env_s=self.env_s, prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
        )  # fmt: skip


BranchHook = Callable[["EpisodeSpec", "EpisodeRecord", SessionHandle], Awaitable[None]]
"""Called after each step that did not end the episode (:attr:`EpisodeRunner.branch`)."""


class TurnLoop(Protocol):
    """What plays one attempt of an episode, between the session's opening and its close.

    :meth:`check` runs once, when the runner is built: it raises
    :class:`~envhub.errors.InvalidRequest` for a policy this loop cannot drive, before
    any episode runs. :meth:`play` plays the opened ``session``: ``record`` holds its
    opening messages and tools, and the loop records the turns it plays there. It
    returns ``None`` when the session ended the episode, or its own stop reason
    (``"max_turns"``: the runner's cap; ``"context_length"``: the conversation outgrew
    the model's context); it raises :class:`ModelFailure` for a model error (masked, not
    retried) and anything else for an environment failure (retried on a fresh session,
    then masked). ``runner`` gives the loop the policy, the turn cap, the weight version
    (``policy_version()``), the gate (:meth:`EpisodeRunner.generate`), task lookup
    (:meth:`EpisodeRunner.task`) and the metrics.
    """

    def check(self, policy: Policy) -> None: ...

    async def play(
        self,
        runner: EpisodeRunner,
        spec: EpisodeSpec,
        record: EpisodeRecord,
        session: SessionHandle,
    ) -> str | None: ...


class EpisodeRunner:
    """Runs episodes of one environment with one policy (shared by all workers of a run).

    ``policy_version`` is read at every model call and recorded on the turn. The policy
    gets the whole task (the reference policy replays its gold actions) where the
    environment's transport gives it (:meth:`EnvironmentClient.task`), else ``None``;
    ``tasks_from`` is another client to read tasks from (a local copy of the environment
    a server or fleet runs, whose transport publishes no tasks), and ``task_of`` replaces
    the lookup altogether (a test's scripted task). ``env_ref`` is recorded on each
    trajectory (the environment and its pins, :meth:`EnvRef.of` the environment's
    ``info()``); ``env_version`` instead records that version without pins (a test's or a
    benchmark's shortcut); without either the environment's ``info()`` is asked once.
    ``metrics`` (optional) counts episodes and times environment steps.
    ``gate`` (set by a stream that updates weights) holds every model call while an
    update runs; an episode whose call an ``abort-and-drop`` update ended raises
    :class:`~envhub.policies.gate.GenerationDropped` out of :meth:`run`.
    ``turn_loop`` plays each episode's turns (default: :class:`PolicyLoop`); it checks
    ``policy`` here. ``branch`` (set by a tree rollout, :mod:`envhub.rollout.tree`) is
    awaited by :class:`PolicyLoop` after every step that did not end the episode, with
    the live session: the point where an episode may be forked. ``compaction``: compact
    the context of long episodes (:mod:`envhub.rollout.compaction`; the policy loop's).
    """

    def __init__(
        self,
        env: EnvironmentClient,
        policy: Policy,
        *,
        env_ref: EnvRef | None = None,
        env_version: str | None = None,
        sampling: dict[str, Any] | None = None,
        max_turns: int | None = None,
        max_env_attempts: int = 3,
        policy_version: Callable[[], int | None] = lambda: None,
        task_of: Callable[[str], Task | None] | None = None,
        tasks_from: EnvironmentClient | None = None,
        metrics: RolloutMetrics | None = None,
        turn_loop: TurnLoop | None = None,
        compaction: CompactionConfig | None = None,
    ) -> None:
        self.turn_loop = turn_loop or PolicyLoop()
        self.turn_loop.check(policy)
        self.env = env
        self.policy = policy
        if env_ref is None and env_version is not None:
            env_ref = EnvRef(name=env.name, version=env_version)
        self.env_ref = env_ref
        self._env_ref_lock = asyncio.Lock()
        if sampling is None:  # record what the policy sends, when it says
            params = getattr(policy, "sampling", None)
            sampling = params.to_request() if isinstance(params, SamplingParams) else {}
        self.sampling = dict(sampling)
        self.max_turns = max_turns
        self.max_env_attempts = max(1, max_env_attempts)
        self.env_backoff = RetryPolicy(base_delay_s=0.25, max_delay_s=5.0)
        self.policy_version = policy_version
        self.task_of = task_of
        self.tasks_from = tasks_from or env
        self._env_gives_tasks = True
        self.metrics = metrics
        self.gate: GenerationGate | None = None
        self.branch: BranchHook | None = None
        self.compaction = compaction

    async def run(self, spec: EpisodeSpec, *, trajectory_id: str | None = None) -> Trajectory:
        """Run the episode to completion; never raises for env or model failures.
        ``trajectory_id``: the id to record (default: a fresh one), so that a caller
        can know the episode by it while it runs (a tree's branch hook)."""
        return await self._counted(self._run(spec, trajectory_id or uuid.uuid4().hex))

    async def run_fork(
        self, spec: EpisodeSpec, record: EpisodeRecord, session: SessionHandle
    ) -> Trajectory:
        """Play a forked ``session`` on from ``record`` (a copy of its parent's record
        at the fork, under the child's own id) to the end of the episode, like
        :meth:`run`. A failure masks the episode without a retry: a fresh session would
        not hold the parent's prefix."""
        started = time.perf_counter()

        async def play() -> Trajectory:
            try:
                return await self._play(spec, record, session, 1, started)
            except GenerationDropped:
                raise
            except Exception as exc:
                masked = self._failure(spec, record, 1, started, exc, final=True)
                assert masked is not None  # final: never retried
                return masked

        return await self._counted(play())

    async def _counted(self, episode: Coroutine[Any, Any, Trajectory]) -> Trajectory:
        metrics = self.metrics
        if metrics is None:
            return await episode
        metrics.episode_started()
        trajectory: Trajectory | None = None
        try:
            trajectory = await episode
            return trajectory
        finally:  # cancelled (deadline, closed stream): ended without a trajectory
            metrics.episode_ended(trajectory)

    async def _run(self, spec: EpisodeSpec, trajectory_id: str) -> Trajectory:
        if self.env_ref is None:
            await self.resolve_env_ref()
        started = time.perf_counter()
        attempt = 0
        retried: dict[str, int] = {}  # error kinds of the attempts that failed and ran again
        while True:
            attempt += 1
            record = EpisodeRecord(trajectory_id, retried)
            try:
                return await self._attempt(spec, record, attempt, started)
            except GenerationDropped:
                raise  # not a failure: the stream discards the episode and counts it
            except Exception as exc:
                final = attempt >= self.max_env_attempts
                masked = self._failure(spec, record, attempt, started, exc, final=final)
                if masked is not None:
                    return masked
            await asyncio.sleep(self.env_backoff.delay(attempt - 1))

    def _failure(
        self,
        spec: EpisodeSpec,
        record: EpisodeRecord,
        attempt: int,
        started: float,
        exc: Exception,
        *,
        final: bool,
    ) -> Trajectory | None:
        """The masked trajectory of a failed attempt, or ``None`` when it is retried
        (an environment failure while attempts remain: its kind is counted in
        ``record.retried_errors``). A model failure is never retried, nor a judge's
        (:class:`~envhub.errors.JudgeError`: masked ``judge_error``)."""
        if isinstance(exc, ModelFailure):
            cause = exc.__cause__
            kind = cause.code if isinstance(cause, EnvhubError) else "internal"
            return self._masked(spec, record, attempt, started, "model_error", kind, str(exc))
        kind = exc.code if isinstance(exc, EnvhubError) else type(exc).__name__
        if isinstance(exc, JudgeError):  # the judge retried already: no second episode
            return self._masked(spec, record, attempt, started, "judge_error", kind, str(exc))
        if final:
            message = f"{type(exc).__name__}: {exc}"
            return self._masked(spec, record, attempt, started, "env_error", kind, message)
        record.retried_errors[kind] = record.retried_errors.get(kind, 0) + 1
        return None

    async def resolve_env_ref(self) -> EnvRef:
        """:attr:`env_ref`, asking the environment for its version and pins the first
        time, once for all concurrent first episodes. If the environment cannot answer,
        this answers version ``"unknown"`` without pins (an episode's own calls will meet
        the same failure and be masked) and the next call asks again."""
        async with self._env_ref_lock:
            if self.env_ref is None:
                with contextlib.suppress(Exception):
                    self.env_ref = EnvRef.of(self.env.name, await self.env.info())
        return self.env_ref or EnvRef(name=self.env.name, version="unknown")

    async def task(self, task_id: str) -> Task | None:
        """The whole task for the policy, where the transport gives it."""
        if self.task_of is not None:
            return self.task_of(task_id)
        if not self._env_gives_tasks:
            return None
        try:
            return await self.tasks_from.task(task_id)
        except NotImplementedError:  # a remote transport: task ids and prompts only
            self._env_gives_tasks = False
            return None

    async def _attempt(
        self, spec: EpisodeSpec, record: EpisodeRecord, attempt: int, started: float
    ) -> Trajectory:
        env_started = time.perf_counter()
        session = await self.env.open(spec.task_id, session_id=f"{record.trajectory_id}-{attempt}")
        record.served_by = session.served_by
        try:
            record.messages, record.tools = await _first_messages(session)
        except BaseException:
            await abort_quietly(session, "rollout episode abort")
            end_episode(self.policy, record.trajectory_id)
            raise
        record.env_s += time.perf_counter() - env_started
        return await self._play(spec, record, session, attempt, started)

    async def _play(
        self,
        spec: EpisodeSpec,
        record: EpisodeRecord,
        session: SessionHandle,
        attempt: int,
        started: float,
    ) -> Trajectory:
        """Play ``session`` on from ``record`` to its close, then record the episode."""
        try:
            stop_override = await self.turn_loop.play(self, spec, record, session)
            env_started = time.perf_counter()
            closed: CloseResult = await session.close()
            record.env_s += time.perf_counter() - env_started
        except BaseException:
            await abort_quietly(session, "rollout episode abort")
            raise
        finally:  # a retry reuses the id and starts again at turn 0
            end_episode(self.policy, record.trajectory_id)
        return self._trajectory(
            spec,
            record,
            started,
            reward=closed.reward,
            reward_components=closed.components,
            reward_info=closed.info,
            stop_reason=stop_override or closed.stop_reason,
            metrics=TrajectoryMetrics(
                turns=closed.metrics.turns,
                tool_calls=closed.metrics.tool_calls,
                tool_errors=closed.metrics.tool_errors,
                errors_by_kind=closed.metrics.errors_by_kind,
                episode_attempts=attempt,
                retried_errors=record.retried_errors,
            ),
        )

    async def generate(self, request: GenerateRequest) -> Completion:
        """The policy's completion. Under a gate, a policy that does not pass its requests
        through it (not :class:`~envhub.policies.gate.GateAware`) is gated here, one whole
        call at a time: an update waits for the call or cancels it, and a cancelled call
        is made again after the update (or the episode dropped, per the update)."""
        if self.gate is None or isinstance(self.policy, GateAware):
            return await self.policy.generate(request)
        while True:
            try:
                return await self.gate.request(lambda: self.policy.generate(request))
            except GenerationAborted:
                await self.gate.resume_point()

    def _masked(
        self,
        spec: EpisodeSpec,
        record: EpisodeRecord,
        attempt: int,
        started: float,
        stop_reason: str,
        kind: str,
        message: str,
    ) -> Trajectory:
        return self._trajectory(
            spec,
            record,
            started,
            stop_reason=stop_reason,
            error=ErrorInfo(kind=kind, message=message[:2000]),
            masked=True,
            metrics=TrajectoryMetrics(
                turns=len(record.turns),
                episode_attempts=attempt,
                retried_errors=record.retried_errors,
            ),
        )

    def _trajectory(
        self, spec: EpisodeSpec, record: EpisodeRecord, started: float, **outcome: Any
    ) -> Trajectory:
        """The fields every trajectory shares, plus this episode's ``outcome``."""
        return Trajectory(
            trajectory_id=record.trajectory_id,
            group_id=spec.group_id,
            task_id=spec.task_id,
            sample_index=spec.sample_index,
            env=self.env_ref or EnvRef(name=self.env.name, version="unknown"),
            served_by=record.served_by,
            model=self.policy.model,
            sampling=self.sampling,
            messages=record.messages,
            tools=record.tools,
            turns=record.turns,
            session_calls=record.session_calls,
            compactions=record.compactions or None,
            timings=_timings(record, started),
            usage=Usage(
                prompt_tokens=record.prompt_tokens, completion_tokens=record.completion_tokens
            ),
            **outcome,
        )


class PolicyLoop:
    """The default :class:`TurnLoop`: the runner's policy and the session in
    alternation, one model call and one step per turn, until the session ends."""

    def check(self, policy: Policy) -> None:
        """Any policy plays this loop."""

    async def play(
        self,
        runner: EpisodeRunner,
        spec: EpisodeSpec,
        record: EpisodeRecord,
        session: SessionHandle,
    ) -> str | None:
        """Alternate model and environment until the session ends; returns ``"max_turns"``
        when the runner's own turn cap (not the session's budget) stopped the episode, or
        ``"context_length"`` when the conversation outgrew the model's context."""
        task = await runner.task(spec.task_id)
        # a forked episode goes on from its parent's turns (a fresh one has none)
        turn = len(record.turns)
        previous_ids = _last_ids(record.turns[-1]) if record.turns else None
        tools = record.tools  # in force: the start's, until a user turn changes them
        for played in record.turns:
            tools = played.tools if played.tools is not None else tools
        changed_tools: list[dict[str, Any]] | None = None  # recorded on the next turn
        # model calls on the current context, and the last one's tokens (the thresholds)
        segment_turns = turn - (record.compactions[-1].turn if record.compactions else 0)
        last_tokens: int | None = None
        while True:
            if runner.max_turns is not None and turn >= runner.max_turns:
                return "max_turns"
            compaction = runner.compaction
            if compaction is not None and compaction.at.reached(segment_turns, last_tokens):
                if await _compact(runner, spec, record, tools, turn, last_tokens):
                    segment_turns, previous_ids = 0, None  # a new context: no prefix
            request = GenerateRequest(
                messages=_context(record),
                tools=tools,
                turn=turn,
                task_id=spec.task_id,
                sample_index=spec.sample_index,
                task=task,
                episode_id=record.trajectory_id,
                group_id=spec.group_id,
                segment=len(record.compactions),
            )
            if runner.gate is not None:
                await runner.gate.wait_open()  # no new generation during a weight update
            version = runner.policy_version()
            call_started = time.perf_counter()
            try:
                completion = await runner.generate(request)
            except ContextLengthExceeded as exc:
                if turn == 0:
                    raise ModelFailure(f"the first prompt does not fit: {exc}") from exc
                return "context_length"
            except PolicyError as exc:
                raise ModelFailure(f"{type(exc).__name__}: {exc}") from exc
            except GenerationDropped:
                raise
            except Exception as exc:
                raise ModelFailure(f"policy bug: {type(exc).__name__}: {exc}") from exc
            previous_ids = record_turn(
                record, completion, previous_ids, message_index=len(record.messages),
                latency_s=time.perf_counter() - call_started, policy_version=version,
                tools=changed_tools,
            )  # fmt: skip
            changed_tools = None
            segment_turns += 1
            last_tokens = completion.prompt_tokens + completion.completion_tokens or None
            record.messages.append(completion.to_message())
            env_started = time.perf_counter()
            result = await session.step(
                completion.tool_calls,
                content=completion.content,
                request_id=f"{record.trajectory_id}-t{turn}",
            )
            step_s = time.perf_counter() - env_started
            record.env_s += step_s
            if runner.metrics is not None:
                runner.metrics.env_step(step_s)
            record.turns[-1].reward = result.turn_reward  # the environment's, per turn
            record.messages.extend(o.to_message() for o in result.observations)
            record.messages.extend(result.user_messages)  # a user turn: the episode goes on
            if result.tools is not None:
                tools = changed_tools = list(result.tools)
            turn += 1
            if result.done:
                return None
            if runner.branch is not None:
                await runner.branch(spec, record, session)


def _context(record: EpisodeRecord) -> list[Message]:
    """What the model is fed: the conversation, or since the last compaction its context
    followed by the messages recorded after it (:meth:`~envhub.trajectory.Compaction.context`,
    as :meth:`~envhub.trajectory.Trajectory.segment_context` reads a recorded segment)."""
    if not record.compactions:
        return record.messages
    return record.compactions[-1].context(record.messages)


async def _compact(
    runner: EpisodeRunner,
    spec: EpisodeSpec,
    record: EpisodeRecord,
    tools: list[dict[str, Any]],
    turn: int,
    tokens_before: int | None,
) -> bool:
    """Compact the episode's context before call ``turn`` with the runner's strategy and
    record it; ``False`` when the strategy had nothing to drop. A summarizer's failure
    is a :class:`ModelFailure`, as for the episode's own calls."""
    config = runner.compaction
    assert config is not None
    context = _context(record)
    summarizer = config.summarizer or runner.policy
    request = CompactionRequest(
        context=context, tools=tools, turn=turn, segment=len(record.compactions) + 1,
        task_id=spec.task_id, sample_index=spec.sample_index,
        episode_id=record.trajectory_id, group_id=spec.group_id, summarizer=summarizer,
        generate=runner.generate if config.summarizer is None else summarizer.generate,
    )  # fmt: skip
    try:
        compacted = await config.strategy.compact(request)
        if compacted is None:
            return False
        compaction = Compaction(
            turn=turn, message_index=len(record.messages), strategy=config.strategy.name,
            trigger=str(config.at), replaced_messages=len(context),
            tokens_before=tokens_before, messages=compacted.messages, summary=compacted.summary,
        )  # fmt: skip
    except GenerationDropped:
        raise
    except PolicyError as exc:
        raise ModelFailure(f"compaction: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # a strategy's bug, or a context that is not messages
        raise ModelFailure(f"compaction bug: {type(exc).__name__}: {exc}") from exc
    summary = compaction.summary
    if summary is not None:
        record.llm_s += summary.latency_s
        record.prompt_tokens += summary.prompt_tokens
        record.completion_tokens += summary.completion_tokens
    record.compactions.append(compaction)
    return True


def record_turn(
    record: EpisodeRecord,
    completion: Completion,
    previous_ids: list[int] | None,
    *,
    message_index: int,
    latency_s: float,
    policy_version: int | None,
    tools: list[dict[str, Any]] | None = None,
) -> list[int] | None:
    """Record one model call as a turn of ``record``: the token ids and logprobs as the
    server returned them, ``prefix_ok`` against ``previous_ids`` (the previous call's
    prompt + completion ids), its time, tokens and endpoint, and its weight version (the
    server's, where it reported one, else ``policy_version``). Returns this call's prompt +
    completion ids (the next call's ``previous_ids``), or ``None`` without ids."""
    record.llm_s += latency_s
    record.prompt_tokens += completion.prompt_tokens
    record.completion_tokens += completion.completion_tokens
    prompt_ids = completion.prompt_token_ids
    completion_ids = completion.completion_token_ids
    prefix_ok = None
    if previous_ids is not None and prompt_ids is not None:
        prefix_ok = prompt_ids[: len(previous_ids)] == previous_ids
    record.turns.append(
        Turn(
            message_index=message_index,
            finish_reason=completion.finish_reason,
            latency_s=latency_s,
            policy_version=(
                completion.weight_version
                if completion.weight_version is not None
                else policy_version
            ),
            completion_versions=completion.completion_versions,
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            completion_logprobs=completion.completion_logprobs,
            prefix_ok=prefix_ok,
            tools=tools,
            endpoint=completion.endpoint,
        )
    )
    return _last_ids(record.turns[-1])


def _last_ids(turn: Turn) -> list[int] | None:
    """A recorded turn's prompt + completion ids (the next call's ``previous_ids``)."""
    if turn.prompt_token_ids is None or turn.completion_token_ids is None:
        return None
    return turn.prompt_token_ids + turn.completion_token_ids


def _timings(record: EpisodeRecord, started: float) -> Timings:
    return Timings(llm_s=record.llm_s, env_s=record.env_s, total_s=time.perf_counter() - started)


async def _first_messages(session: SessionHandle) -> tuple[list[Message], list[dict[str, Any]]]:
    """The opening messages and tools (``reset()`` is idempotent on every transport)."""
    start = await session.reset()
    return list(start.messages), list(start.tools)

"""In-process sessions: one environment instance bound to one task, with budgets.

This is the only place tool calls are dispatched. The HTTP server and the gymnasium
adapter drive this class too, so malformed calls, timeouts, truncation and metrics
behave the same whichever transport a caller uses. It is also where model text meets
the environment: arguments no parser or encoder can take are error observations
(:func:`envhub.tools.parse_arguments`), and a turn's free text and every observation
are made valid Unicode (:func:`envhub.model_text.valid_text`), so that no answer quoting
them fails on a transport.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envhub.budgets import Budgets
from envhub.environment import Environment, UserTurn
from envhub.errors import (
    EnvhubError,
    EnvironmentFailure,
    InvalidRequest,
    NotDeterministic,
    SandboxError,
    SessionClosed,
    ToolArgumentError,
    ToolTimeout,
)
from envhub.model_text import valid_text
from envhub.protocol import ClosingOnExit
from envhub.runtime.cleanup import record_cleanup_failure
from envhub.runtime.validation import check_session_id, fork_request, step_calls
from envhub.task import Task
from envhub.tools import ToolSpec, parse_arguments
from envhub.types import (
    CloseResult,
    EpisodeMetrics,
    Observation,
    Reward,
    SessionInfo,
    SessionStart,
    StepResult,
    StopReason,
    ToolCall,
)

__all__ = ["Session", "truncate_output"]

_REPLAY_CACHE = 8  # step replies kept per session for request_id idempotency
_MAX_ECHOED_NAME = 256  # longest tool name an error observation repeats back
_FORK_CACHE = 8  # forks kept per session for fork_id idempotency
_SHOWN = 300  # characters of a diverging observation a NotDeterministic error quotes


@dataclass(frozen=True, slots=True)
class _Turn:
    """One step as it ran: what a fork by replay runs again, and the answer (the
    :class:`StepResult` as JSON, which the caller cannot change) it must get again."""

    calls: tuple[ToolCall, ...]
    content: str | None
    result: bytes


def truncate_output(text: str, limit: int) -> str:
    """Keep the head and tail of ``text`` with a visible marker of what was cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    head = limit // 2
    return f"{text[:head]}\n[truncated {cut} chars]\n{text[len(text) - (limit - head) :]}"


def _render_output(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _valid_call(call: ToolCall) -> ToolCall:
    """``call`` with its id and name made valid text (the environment sees them, and the
    observation sends them back); the arguments are judged by :func:`parse_arguments`."""
    id_, name = valid_text(call.id), valid_text(call.name)
    if id_ is call.id and name is call.name:
        return call
    return call.model_copy(update={"id": id_, "name": name})


def _observation(
    call_id: str, name: str, content: str, *, truncated: bool, is_error: bool = False
) -> Observation:
    """An observation whose text any transport can send: a tool's output may hold lone
    surrogates (bytes a program printed, decoded with ``surrogateescape``)."""
    return Observation(
        tool_call_id=call_id, name=name, content=valid_text(content), is_error=is_error,
        truncated=truncated,
    )  # fmt: skip


class Session(ClosingOnExit):
    """One episode, the in-process :class:`~envhub.protocol.SessionHandle`. Create with
    ``await envhub.make(...).open(task_id)`` (or ``async with``).

    Steps are serialised per session; the session holds all per-episode state, so it can
    live in any process that owns it (in-process, behind HTTP, or in a Ray actor).
    """

    def __init__(
        self,
        env: Environment,
        task: Task,
        *,
        env_name: str,
        budgets: Budgets,
        new_env: Callable[[], Environment],
        session_id: str | None = None,
    ) -> None:
        """``new_env`` builds another instance with ``env``'s options: a fork's children
        are built with it (called in a worker thread, as a constructor may block)."""
        if session_id is not None:
            check_session_id(session_id)  # the id the HTTP API would take, on every transport
        self.env = env
        self.task = task
        self.env_name = env_name
        self.budgets = budgets
        self.session_id = session_id or uuid.uuid4().hex
        self.served_by: str | None = None  # in-process
        self.metrics = EpisodeMetrics()
        self.done = False
        self.closed = False
        self._aborted = False
        self.stop_reason: StopReason | None = None
        self.created_at = time.monotonic()
        self.last_active = self.created_at
        self._deadline = self.created_at + budgets.episode_timeout_s
        self._start: SessionStart | None = None
        self._reward: Reward | None = None
        self._reward_failure: EnvhubError | None = None
        self._close_result: CloseResult | None = None
        self._replies: OrderedDict[str, StepResult] = OrderedDict()
        self._lock = asyncio.Lock()
        self._specs: Mapping[str, ToolSpec] = type(env).tool_specs()
        self._new_env = new_env
        self._history: list[_Turn] = []  # every step that ran, for forks by replay
        self._forks: OrderedDict[str, list[Session]] = OrderedDict()

    # -- lifecycle -----------------------------------------------------------------------

    async def reset(self) -> SessionStart:
        """Start the episode (idempotent: a second call returns the same start)."""
        if self._start is None:
            try:
                messages = await self.env.reset(self.task)
            except EnvhubError:
                raise
            except Exception as exc:
                raise EnvironmentFailure(f"reset failed: {type(exc).__name__}: {exc}") from exc
            # the tools of this episode, which an environment may learn at reset (an MCP
            # server's list); the class's @tool methods otherwise
            self._specs = self.env.episode_tools()
            self._start = SessionStart(
                session_id=self.session_id,
                task_id=self.task.id,
                messages=messages,
                tools=[spec.schema for spec in self._specs.values()],
            )
        return self._start

    async def step(
        self,
        tool_calls: Sequence[ToolCall | dict[str, Any]],
        content: str | None = None,
        request_id: str | None = None,
    ) -> StepResult:
        """Run one assistant turn's tool calls and return one observation per call.

        A turn the HTTP API would refuse (a call without a name, a ``request_id`` over
        :data:`~envhub.types.MAX_REQUEST_ID` characters) raises
        :class:`~envhub.errors.InvalidRequest` with the server's message and counts nothing.
        """
        calls = [_valid_call(c) for c in step_calls(tool_calls, content, request_id)]
        content = None if content is None else valid_text(content)
        if request_id is not None and request_id in self._replies:
            return self._replies[request_id]
        async with self._lock:
            if request_id is not None and request_id in self._replies:
                return self._replies[request_id]
            result = await self._step(calls, content)
            self._history.append(
                _Turn(tuple(calls), content, result.__pydantic_serializer__.to_json(result))
            )
            if request_id is not None:
                self._replies[request_id] = result
                while len(self._replies) > _REPLAY_CACHE:
                    self._replies.popitem(last=False)
            return result

    async def close(self) -> CloseResult:
        """Score the episode and free its resources; closing twice returns the same result.
        After :meth:`abort` there is nothing to score: :class:`~envhub.errors.SessionClosed`."""
        async with self._lock:
            if self._close_result is None:
                if self._aborted:
                    raise SessionClosed(f"session {self.session_id} was aborted, not scored")
                if not self.done:
                    self._end("closed")
                reward = await self._compute_reward()
                try:
                    await self.env.close()
                except Exception as exc:
                    raise EnvironmentFailure(f"close failed: {type(exc).__name__}: {exc}") from exc
                finally:
                    self.closed = True
                self._close_result = CloseResult(
                    reward=reward.value,
                    components=reward.components,
                    info=reward.info,
                    metrics=self.metrics,
                    stop_reason=self.stop_reason,
                )
            return self._close_result

    async def abort(self) -> None:
        """Free resources without scoring (server reaper, crashed clients); the
        environment's ``close`` failing is logged and counted, not raised
        (:mod:`envhub.runtime.cleanup`)."""
        if not self.closed:
            self.closed = self._aborted = True
            try:
                await self.env.close()
            except Exception as exc:
                record_cleanup_failure(f"Session.abort of {self.env_name}", exc)

    async def fork(self, n: int = 1, *, fork_id: str | None = None) -> list[Session]:
        """``n`` children of the episode as it stands (:meth:`SessionHandle.fork
        <envhub.protocol.SessionHandle.fork>`): each a session of its own with this one's
        environment state, tools in force, turns and metrics so far and episode deadline.

        The environment's :meth:`~envhub.Environment.snapshot` is restored into a fresh
        instance per child; an environment without one is replayed: a fresh instance is
        reset and given this episode's steps again, and every answer must come out as
        recorded, else :class:`~envhub.errors.NotDeterministic` (no child is left).
        A repeated ``fork_id`` returns the children of the first call with it. A closed,
        aborted or ended session raises :class:`~envhub.errors.SessionClosed`.
        """
        request = fork_request(n, fork_id)
        async with self._lock:
            if fork_id is not None and fork_id in self._forks:
                children = self._forks[fork_id]
                if len(children) != n:
                    raise InvalidRequest(
                        f"fork id {fork_id!r} already forked {len(children)} children, not {n}"
                    )
                return list(children)
            if self.closed:
                raise SessionClosed(f"session {self.session_id} is closed")
            if self.done:
                raise SessionClosed(
                    f"session {self.session_id} has ended (stop_reason={self.stop_reason}); "
                    "there is nothing left to fork"
                )
            if self._start is None:
                await self.reset()
            state = await self._snapshot()
            ids = [f"{fork_id}-{i}" if fork_id else uuid.uuid4().hex for i in range(request.n)]
            made = await asyncio.gather(*(self._child(sid, state) for sid in ids),
                                        return_exceptions=True)
            failed = [c for c in made if isinstance(c, BaseException)]
            children = [c for c in made if not isinstance(c, BaseException)]
            if failed:
                await asyncio.gather(*(c.abort() for c in children), return_exceptions=True)
                raise failed[0]
            if fork_id is not None:
                self._forks[fork_id] = children
                while len(self._forks) > _FORK_CACHE:
                    self._forks.popitem(last=False)
            return list(children)

    async def info(self) -> SessionInfo:
        """The state summary (:class:`~envhub.protocol.SessionHandle`'s ``info``)."""
        return self.summary()

    def summary(self) -> SessionInfo:
        """The state summary, without awaiting (for the server's session store)."""
        now = time.monotonic()
        return SessionInfo(
            session_id=self.session_id,
            env=self.env_name,
            task_id=self.task.id,
            done=self.done,
            closed=self.closed,
            stop_reason=self.stop_reason,
            metrics=self.metrics,
            age_s=now - self.created_at,
            idle_s=now - self.last_active,
        )

    async def __aenter__(self) -> Session:
        await self.reset()
        return self

    # -- internals -----------------------------------------------------------------------

    async def _snapshot(self) -> object | None:
        try:
            return await self.env.snapshot()
        except EnvhubError:
            raise
        except Exception as exc:
            raise EnvironmentFailure(f"snapshot failed: {type(exc).__name__}: {exc}") from exc

    async def _child(self, session_id: str, state: object | None) -> Session:
        """One child, built by the factory of every episode (in the event loop, as a new
        session's environment is: a constructor only stores its options, so a worker
        thread's hop would cost more than the build), then restored or replayed."""
        env = self._new_env()
        child = Session(env, self.task, env_name=self.env_name, budgets=self.budgets,
                        new_env=self._new_env, session_id=session_id)
        try:
            if state is None:
                await child._replay(self)
            else:
                try:
                    await env.restore(state)
                except EnvhubError:
                    raise
                except Exception as exc:
                    raise EnvironmentFailure(
                        f"restore failed: {type(exc).__name__}: {exc}"
                    ) from exc
                assert self._start is not None  # fork resets first
                child._start = self._start.model_copy(update={"session_id": session_id})
                child._history = list(self._history)
        except BaseException:
            await child.abort()
            raise
        child._specs = dict(self._specs)
        # its one mutable field copied by hand: a deep copy costs more than the rest of a
        # native fork
        child.metrics = self.metrics.model_copy(
            update={"errors_by_kind": dict(self.metrics.errors_by_kind)}
        )
        child.created_at, child._deadline = self.created_at, self._deadline
        return child

    async def _replay(self, parent: Session) -> None:
        """Reset and step this fresh session through ``parent``'s episode, checking that
        the start and every step's answer come out as ``parent`` recorded them."""
        assert parent._start is not None  # fork resets first
        start = await self.reset()
        expected = parent._start.model_copy(update={"session_id": self.session_id})
        if start != expected:
            self._diverged("its reset", expected.model_dump_json(), start.model_dump_json())
        for number, turn in enumerate(parent._history, 1):
            result = await self._step(list(turn.calls), turn.content)
            replayed = result.__pydantic_serializer__.to_json(result)
            if replayed != turn.result:
                self._diverged(f"turn {number} of {len(parent._history)}",
                               turn.result.decode(), replayed.decode())
            self._history.append(turn)

    def _diverged(self, where: str, recorded: str, replayed: str) -> None:
        pairs = enumerate(zip(recorded, replayed, strict=False))  # where they part
        at = next((i for i, (a, b) in pairs if a != b), min(len(recorded), len(replayed)))
        lo = max(0, at - _SHOWN // 3)
        raise NotDeterministic(
            f"{self.env_name} is not deterministic: replaying {where} in a fresh instance "
            f"gave {replayed[lo:lo + _SHOWN]!r} where the episode had "
            f"{recorded[lo:lo + _SHOWN]!r}; forking it needs a native "
            "snapshot() (docs: Forking)"
        )

    async def _step(self, calls: list[ToolCall], content: str | None) -> StepResult:
        if self.closed:
            raise SessionClosed(f"session {self.session_id} is closed")
        if self.done:
            raise SessionClosed(
                f"session {self.session_id} has ended (stop_reason={self.stop_reason}); close it"
            )
        if self._start is None:
            await self.reset()
        self.last_active = time.monotonic()
        self.metrics.turns += 1
        observations: list[Observation] = []
        await self.env.on_assistant_message(list(calls), content)
        if not calls:
            await self.env.on_final_answer(content or "")
            self._end_if_env_asked()
            if not self.done and type(self.env).final_answer_ends_episode:
                self._end("final_answer")
        for call in calls:
            if self.done:
                observations.append(
                    self._error(call, "not executed: the episode already ended", None)
                )
                continue
            observations.append(await self._run_call(call))
            self._end_if_env_asked()
        turn_reward = await self._turn_reward()
        user_turn = await self._next_user_turn()
        if not self.done and self.metrics.turns >= self.budgets.max_turns:
            self._end("max_turns")
        if not self.done and time.monotonic() >= self._deadline:
            self._end("timeout")
        result = StepResult(observations=observations, done=self.done,
                            stop_reason=self.stop_reason, turn_reward=turn_reward)
        if user_turn is not None and not self.done:
            result.user_messages = user_turn.chat_messages()
            if user_turn.tools is not None:
                self._specs = dict(user_turn.tools)
                result.tools = [spec.schema for spec in self._specs.values()]
        if self.done:
            result.reward = (await self._compute_reward()).value
        self.last_active = time.monotonic()
        return result

    def _end(self, reason: StopReason) -> None:
        self.done = True
        self.stop_reason = reason

    async def _next_user_turn(self) -> UserTurn | None:
        """When this step ended the episode by a final answer or a terminal tool: the
        environment's next user turn (:meth:`Environment.next_user_turn`), which reopens
        the episode; the budget checks that follow may still end it."""
        if self.stop_reason not in ("final_answer", "terminal_tool"):
            return None
        try:
            turn = await self.env.next_user_turn()
        except EnvhubError:
            raise
        except Exception as exc:
            raise EnvironmentFailure(
                f"next_user_turn failed: {type(exc).__name__}: {exc}"
            ) from exc
        self._end_if_env_asked()
        if turn is None or self.env.requested_stop_reason is not None:
            return None
        if not isinstance(turn, UserTurn):
            raise EnvironmentFailure(
                f"next_user_turn returned {type(turn).__name__}, not a UserTurn or None"
            )
        self.done = False
        self.stop_reason = None
        return turn

    def _end_if_env_asked(self) -> None:
        """After a tool call or final answer: honour :meth:`Environment.end_episode`."""
        if self.env.requested_stop_reason is not None:
            self._end(self.env.requested_stop_reason)

    def _error(self, call: ToolCall, message: str, kind: str | None) -> Observation:
        if kind is not None:
            self.metrics.count_error(kind)
        content, cut = self._within_budget(f"Error: {message}")  # messages quote model input
        name = call.name[:_MAX_ECHOED_NAME]  # an unknown name is the model's input too
        return _observation(call.id, name, content, truncated=cut, is_error=True)

    def _within_budget(self, text: str) -> tuple[str, bool]:
        """``text`` cut to the output budget, and whether it was cut (counted in the
        metrics, and told to the observation)."""
        if len(text) <= self.budgets.max_output_chars:
            return text, False
        self.metrics.truncated_outputs += 1
        return truncate_output(text, self.budgets.max_output_chars), True

    async def _run_call(self, call: ToolCall) -> Observation:
        self.metrics.tool_calls += 1
        spec = self._specs.get(call.name)
        if spec is None:
            known = ", ".join(sorted(self._specs)) or "none"
            return self._error(
                call, f"unknown tool {call.name!r}; available tools: {known}", "unknown_tool"
            )
        try:
            kwargs = spec.validate(parse_arguments(call.name, call.arguments))
        except ToolArgumentError as exc:
            return self._error(call, exc.message, "invalid_arguments")
        remaining = self._deadline - time.monotonic()
        timeout = min(spec.timeout or self.budgets.tool_timeout_s, max(remaining, 0.0))
        started = time.perf_counter()
        try:
            output = await asyncio.wait_for(self._invoke(spec, kwargs), timeout=timeout)
        except (asyncio.TimeoutError, ToolTimeout):
            if time.monotonic() >= self._deadline:
                self._end("timeout")
            return self._error(call, f"{call.name} timed out after {timeout:.1f}s", "timeout")
        except SandboxError:
            raise  # infrastructure, not the model's fault: the caller masks the episode
        except Exception as exc:
            return self._error(call, f"{type(exc).__name__}: {exc}", "exception")
        finally:
            self.metrics.env_s += time.perf_counter() - started
        text, cut = self._within_budget(_render_output(output))
        if spec.terminal:
            self._end("terminal_tool")
        return _observation(call.id, call.name, text, truncated=cut)

    async def _invoke(self, spec: ToolSpec, kwargs: dict[str, Any]) -> Any:
        method = getattr(self.env, spec.attr)
        if spec.is_async:
            return await method(**kwargs)
        return await asyncio.to_thread(method, **kwargs)

    async def _turn_reward(self) -> float | None:
        """The environment's reward for this turn (:meth:`Environment.turn_reward`),
        checked: a finite ``int`` or ``float``, or ``None``."""
        try:
            if inspect.iscoroutinefunction(self.env.turn_reward):
                value = await self.env.turn_reward()
            else:
                value = self.env.turn_reward()
        except EnvhubError:
            raise
        except Exception as exc:
            raise EnvironmentFailure(f"turn_reward failed: {type(exc).__name__}: {exc}") from exc
        if value is None:
            return None
        try:  # an int too large for a float overflows: refused like infinity
            number = float(value) if isinstance(value, int | float) else math.nan
        except OverflowError:
            number = math.inf
        if isinstance(value, bool) or not math.isfinite(number):
            raise EnvironmentFailure(
                f"turn_reward returned {str(value)[:100]}: a per-turn reward is a finite "
                "number or None"
            )
        return number

    async def _compute_reward(self) -> Reward:
        """The episode's reward, computed once; a reward that failed fails again the same
        way without running again (a close after the failing step would ask its judge,
        or run its tests, a second time)."""
        if self._reward_failure is not None:
            raise self._reward_failure
        if self._reward is None:
            try:
                if inspect.iscoroutinefunction(self.env.reward):
                    value = await self.env.reward()
                else:  # sync rewards may run tests or queries: keep them off the event loop
                    value = await asyncio.to_thread(self.env.reward)
            except EnvhubError as exc:
                self._reward_failure = exc
                raise
            except Exception as exc:
                self._reward_failure = EnvironmentFailure(
                    f"reward failed: {type(exc).__name__}: {exc}"
                )
                raise self._reward_failure from exc
            self._reward = value if isinstance(value, Reward) else Reward(value=float(value))
        return self._reward

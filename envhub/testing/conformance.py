"""The conformance suite of :class:`envhub.protocol.EnvironmentClient`: does a transport
behave as the protocol promises, whatever environment it reaches?

``await check_client_conformance(client)`` runs every check against a live client and
raises ``AssertionError`` listing each check that failed (all checks run, even after a
failure); :func:`run_conformance` returns the :class:`ConformanceReport` instead. Plugin
authors run it over their environment and each transport (in-process, HTTP, WebSocket);
authors of a new transport run it over the shipped environments.

The checks need nothing of the environment beyond its tool schemas: every step they take
is a malformed or unknown tool call (which every environment must answer with an error
observation) or a final answer, so they work on any environment and leave its state
alone; the fork check alone steps real calls, a short prefix of the task's gold
solution (``fork_prefix``), since a fork must carry the state they leave. Every session
a check opens is aborted when the check ends, passed or not. Each check has its own time
limit, so a transport that hangs fails that check instead of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from envhub.errors import (
    InvalidRequest,
    NotDeterministic,
    SessionClosed,
    SessionError,
    TaskNotFound,
)
from envhub.policies.reference import ReferencePolicy
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.task import GoldCall, Task
from envhub.testing.hostile import deeply_nested_json
from envhub.types import (
    MAX_FORK,
    CloseResult,
    EnvironmentInfo,
    SessionInfo,
    StepResult,
    ToolCall,
)

__all__ = [
    "CHECKS",
    "ConformanceFailure",
    "ConformanceReport",
    "check_client_conformance",
    "run_conformance",
]

#: a JSON value of the wrong type for each JSON-schema type a tool parameter can declare
_WRONG_VALUE: dict[str, Any] = {
    "string": [1, 2],
    "integer": "not a number",
    "number": "not a number",
    "boolean": "perhaps",
    "array": 5,
    "object": 5,
}


@dataclass(frozen=True)
class ConformanceFailure:
    """One failed check and why (the assertion's message, or the unexpected exception)."""

    check: str
    message: str


@dataclass
class ConformanceReport:
    env: str
    passed: list[str] = field(default_factory=list)
    failures: list[ConformanceFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failed(self) -> list[str]:
        return [f.check for f in self.failures]

    def __str__(self) -> str:
        lines = [f"{len(self.failures)} conformance check(s) failed for {self.env}:"]
        lines += [f"  {f.check}: {f.message}" for f in self.failures]
        return "\n".join(lines)


class _Context:
    """What the checks share: the client, the tasks they open, and the client's own
    answers (fetched once, lazily, so a broken ``info`` fails the checks that need it)."""

    def __init__(
        self, client: EnvironmentClient, task_ids: Sequence[str] | None, malformed_tool: str | None,
        fork_prefix: Sequence[GoldCall] | None = None,
    ) -> None:
        self.client = client
        self._task_ids = list(task_ids) if task_ids is not None else None
        self.malformed_tool = malformed_tool
        self.fork_prefix = fork_prefix
        self._info: EnvironmentInfo | None = None

    async def info(self) -> EnvironmentInfo:
        if self._info is None:
            self._info = await self.client.info()
        return self._info

    async def task_ids(self) -> list[str]:
        """The tasks the checks open: the caller's, or the first one the client lists."""
        if self._task_ids is None:
            listed = await self.client.task_ids()
            assert listed, "task_ids() listed no task to open"
            self._task_ids = listed[:1]
        return self._task_ids

    async def task_id(self) -> str:
        return (await self.task_ids())[0]

    @contextlib.asynccontextmanager
    async def session(self, task_id: str | None, **kwargs: Any) -> AsyncIterator[SessionHandle]:
        """A session on ``task_id`` (None: the client picks), aborted when the check ends."""
        session = await self.client.open(task_id, **kwargs)
        try:
            yield session
        finally:
            with contextlib.suppress(Exception):  # the check's own failure is what matters
                await session.abort()


def _call(name: str, arguments: str | dict[str, Any] = "{}") -> ToolCall:
    return ToolCall(id=f"call-{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)


def _unknown_call() -> ToolCall:
    return _call(f"no_such_tool_{uuid.uuid4().hex[:8]}")


def _tool_name(tool: dict[str, Any]) -> str:
    return str(tool["function"]["name"])


async def _expect_error(action: Awaitable[object], error: type[Exception], what: str) -> None:
    """``action`` must raise ``error`` (an envhub typed error, not a generic one)."""
    try:
        result = await action
    except error:
        return
    except Exception as exc:
        raise AssertionError(
            f"{what} raised {type(exc).__name__}: {exc}, not {error.__name__}"
        ) from exc
    raise AssertionError(f"{what} returned {result!r} instead of raising")


def _check_observations(
    result: StepResult, calls: list[ToolCall], what: str, legal: Collection[ToolCall] = ()
) -> None:
    """One observation per call, in order, each an error but those of the ``legal`` calls."""
    assert isinstance(result, StepResult), f"{what}: step returned {type(result).__name__}"
    got = [o.tool_call_id for o in result.observations]
    assert got == [c.id for c in calls], (
        f"{what}: one observation per call in order expected, tool_call_ids {got}"
    )
    for call, observation in zip(calls, result.observations, strict=True):
        assert observation.is_error or call in legal, (
            f"{what}: {call.name}({call.arguments!r}) gave a non-error observation "
            f"{observation.content[:200]!r}"
        )


# -- the checks -------------------------------------------------------------------------


async def _check_protocol(ctx: _Context) -> None:
    """The client has every member of the protocol."""
    assert isinstance(ctx.client, EnvironmentClient), (
        f"{type(ctx.client).__name__} lacks members of EnvironmentClient"
    )
    assert isinstance(ctx.client.name, str) and ctx.client.name, "name is empty"
    assert isinstance(ctx.client.version, str) and ctx.client.version, "version is empty"


async def _check_info(ctx: _Context) -> None:
    """info(): name and version as the client says, OpenAI tool schemas, task count, splits."""
    info = await ctx.info()
    assert isinstance(info, EnvironmentInfo), f"info() returned {type(info).__name__}"
    assert info.name == ctx.client.name, f"info().name {info.name!r} != {ctx.client.name!r}"
    assert info.version == ctx.client.version, (
        f"info().version {info.version!r} != {ctx.client.version!r}"
    )
    assert info.tools, "info() lists no tools"
    names = []
    for tool in info.tools:
        function = tool.get("function")
        assert tool.get("type") == "function" and isinstance(function, dict), (
            f"not an OpenAI function tool: {tool!r}"
        )
        assert isinstance(function.get("name"), str) and function["name"], f"unnamed: {tool!r}"
        assert isinstance(function.get("description", ""), str), f"bad description: {tool!r}"
        parameters = function.get("parameters")
        assert isinstance(parameters, dict) and parameters.get("type") == "object", (
            f"{function['name']}: parameters must be a JSON-schema object, got {parameters!r}"
        )
        names.append(function["name"])
    assert len(set(names)) == len(names), f"tool names repeat: {names}"
    listed = await ctx.client.task_ids()
    assert info.tasks == len(listed), f"info().tasks {info.tasks} != {len(listed)} task ids"
    assert info.splits and len(set(info.splits)) == len(info.splits), (
        f"info().splits must list each split once: {info.splits}"
    )


async def _check_task_listing(ctx: _Context) -> None:
    """task_ids(): unique, stable, the splits partition them; an unknown split is refused."""
    info = await ctx.info()
    ids = await ctx.client.task_ids()
    assert all(isinstance(i, str) and i for i in ids), "task ids must be non-empty strings"
    assert len(set(ids)) == len(ids), "task_ids() repeats ids"
    assert await ctx.client.task_ids() == ids, "task_ids() changed between two calls"
    seen: set[str] = set()
    for split in info.splits:
        in_split = await ctx.client.task_ids(split)
        assert in_split, f"split {split!r} is listed but has no tasks"
        assert not seen.intersection(in_split), f"split {split!r} shares ids with another split"
        seen.update(in_split)
        order = [i for i in ids if i in set(in_split)]
        assert in_split == order, f"split {split!r} is not in the order of task_ids()"
    assert seen == set(ids), f"{len(set(ids) - seen)} task(s) belong to no listed split"
    await _expect_error(
        ctx.client.task_ids(f"no-such-split-{uuid.uuid4().hex[:8]}"), InvalidRequest,
        "task_ids(unknown split)",
    )


async def _check_task(ctx: _Context) -> None:
    """task(id) gives that task (or NotImplementedError on a remote transport)."""
    task_id = await ctx.task_id()
    try:
        task = await ctx.client.task(task_id)
    except NotImplementedError:
        return
    assert isinstance(task, Task) and task.id == task_id, f"task({task_id!r}) returned {task!r}"
    await _expect_error(ctx.client.task(f"no-such-task-{uuid.uuid4().hex}"), TaskNotFound,
                        "task(unknown id)")  # fmt: skip


async def _check_unknown_task(ctx: _Context) -> None:
    """Opening an unknown task raises TaskNotFound, awaited or used with ``async with``."""
    unknown = f"no-such-task-{uuid.uuid4().hex}"

    async def await_open() -> object:
        session = await ctx.client.open(unknown)
        await session.abort()
        return session

    async def enter_open() -> object:
        async with ctx.client.open(unknown) as session:
            return session

    await _expect_error(await_open(), TaskNotFound, "await open(unknown task)")
    await _expect_error(enter_open(), TaskNotFound, "async with open(unknown task)")


async def _check_lifecycle(ctx: _Context) -> None:
    """open -> reset (idempotent) -> step (one observation per call) -> close (a float
    reward; closing again gives the same result) -> step raises SessionClosed; for each
    task."""
    info = await ctx.info()
    for task_id in await ctx.task_ids():
        async with ctx.session(task_id) as session:
            assert isinstance(session, SessionHandle), (
                f"{type(session).__name__} lacks members of SessionHandle"
            )
            start = await session.reset()
            assert start.task_id == task_id, f"started task {start.task_id!r}, not {task_id!r}"
            assert start.session_id == session.session_id, "reset() names another session"
            assert start.messages, f"{task_id}: reset() gave no messages"
            assert [_tool_name(t) for t in start.tools] == [_tool_name(t) for t in info.tools], (
                "the session's tools differ from info().tools"
            )
            assert await session.reset() == start, "a second reset() gave another start"
            calls = [_unknown_call(), _unknown_call()]
            _check_observations(await session.step(calls), calls, "two unknown tools")
            one = [_unknown_call()]
            _check_observations(await session.step(one), one, "one unknown tool")
            closed = await session.close()
            assert isinstance(closed, CloseResult), f"close() returned {type(closed).__name__}"
            assert isinstance(closed.reward, float), f"reward {closed.reward!r} is not a float"
            assert closed.stop_reason == "closed", (
                f"closed before the episode ended, stop_reason {closed.stop_reason!r}"
            )
            assert closed.metrics.turns == 2, f"2 steps, metrics.turns {closed.metrics.turns}"
            assert closed.metrics.tool_errors == 3, (
                f"3 failed calls, metrics.tool_errors {closed.metrics.tool_errors}"
            )
            assert await session.close() == closed, "a second close() gave another result"
            await _expect_error(session.step([_unknown_call()]), SessionClosed,
                                "step after close")  # fmt: skip


async def _check_final_answer(ctx: _Context) -> None:
    """A final answer that ends the episode carries the reward close() gives; a step
    after it raises SessionClosed."""
    async with ctx.session(await ctx.task_id()) as session:
        result = await session.step([], content="I cannot solve this.")
        assert isinstance(result, StepResult) and result.observations == [], (
            f"a final answer gave observations: {result!r}"
        )
        if not result.done:  # this environment answers with a user turn instead
            return
        assert result.stop_reason is not None, "an ended episode has no stop_reason"
        assert isinstance(result.reward, float), f"ended with reward {result.reward!r}"
        await _expect_error(session.step([_unknown_call()]), SessionClosed,
                            "step after the episode ended")  # fmt: skip
        closed = await session.close()
        assert closed.reward == result.reward, (
            f"close() reward {closed.reward} != the final step's {result.reward}"
        )
        assert closed.stop_reason == result.stop_reason, (
            f"close() stop_reason {closed.stop_reason!r} != {result.stop_reason!r}"
        )


def _wrongly_typed_arguments(tools: list[dict[str, Any]], first: str | None) -> ToolCall | None:
    """A call whose every argument has the wrong JSON type, on the first tool (``first``
    preferred) whose required parameters all declare a plain type."""
    ordered = sorted(tools, key=lambda t: _tool_name(t) != first)
    for tool in ordered:
        schema = tool["function"]["parameters"]
        props: dict[str, Any] = schema.get("properties", {})
        wrong = {p: _WRONG_VALUE[s["type"]] for p, s in props.items()
                 if isinstance(s, dict) and s.get("type") in _WRONG_VALUE}  # fmt: skip
        if wrong and set(schema.get("required", [])) <= set(wrong):
            return _call(_tool_name(tool), json.dumps(wrong))
    return None


async def _check_malformed_calls(ctx: _Context) -> None:
    """Invalid JSON, non-object arguments, an unknown tool, wrong types and missing
    arguments are error observations (in one step, in order); the session keeps working."""
    info = await ctx.info()
    names = [_tool_name(t) for t in info.tools]
    tool = ctx.malformed_tool or names[0]
    assert tool in names, f"malformed_tool {tool!r} is not one of the tools {names}"
    calls = [_call(tool, '{"unterminated": '), _call(tool, "[1, 2]"), _unknown_call()]
    typed = _wrongly_typed_arguments(info.tools, ctx.malformed_tool)
    if typed is not None:
        calls.append(typed)
    for t in info.tools:
        if t["function"]["parameters"].get("required"):
            calls.append(_call(_tool_name(t), "{}"))
            break
    async with ctx.session(await ctx.task_id()) as session:
        _check_observations(await session.step(calls), calls, "malformed calls")
        status = await session.info()
        assert not status.done and not status.closed, f"malformed calls ended it: {status!r}"
        after = [_unknown_call()]
        _check_observations(await session.step(after), after, "a step after malformed calls")
        closed = await session.close()
        assert closed.metrics.tool_errors == len(calls) + 1, (
            f"{len(calls) + 1} failed calls, metrics.tool_errors {closed.metrics.tool_errors}"
        )


def _nested_arguments(depth: int) -> dict[str, Any]:
    """``{"value": [[...]]}`` with ``depth`` nested lists, built without recursion."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return {"value": value}


def _hostile_arguments() -> list[str | dict[str, Any]]:
    """Arguments a model can write that break parsers and encoders: 1,000 nested lists
    (as JSON text and as a parsed dict), an integer literal of 100,000 digits, unpaired
    surrogates (as a JSON escape and in a parsed string)."""
    return [
        deeply_nested_json(),
        _nested_arguments(1000),
        '{"value": ' + "9" * 100_000 + "}",
        '{"value": "\\ud800"}',
        {"value": "\udcff"},
    ]


async def _check_hostile_arguments(ctx: _Context) -> None:
    """Hostile arguments (:func:`_hostile_arguments`) and a tool name that is not valid
    text are error observations, a legal ``1e999`` an observation, all in one step; the
    session keeps working; and an episode of the dict forms with a final answer that is
    not valid text, through the rollout engine, is scored in one attempt (not masked)."""
    info = await ctx.info()
    tool = ctx.malformed_tool or _tool_name(info.tools[0])
    refused = [_call(tool, arguments) for arguments in _hostile_arguments()]
    refused.append(_call(f"\ud800{uuid.uuid4().hex[:8]}"))
    legal = _call(tool, '{"conformance_no_such_parameter": 1e999}')
    task_id = await ctx.task_id()
    async with ctx.session(task_id) as session:
        result = await session.step([*refused, legal])
        _check_observations(result, [*refused, legal], "hostile arguments", legal=[legal])
        for observation in result.observations:
            observation.model_dump_json()  # raises for text no transport can send
        status = await session.info()
        assert not status.done and not status.closed, f"hostile arguments ended it: {status!r}"
        after = [_unknown_call()]
        _check_observations(await session.step(after), after, "a step after hostile arguments")
    gold = [GoldCall(name=tool, arguments=a) for a in _hostile_arguments() if isinstance(a, dict)]
    task = Task(id=task_id, prompt=[], answer="\ud800", gold_actions=gold)
    runner = EpisodeRunner(ctx.client, ReferencePolicy(), max_env_attempts=1,
                           task_of=lambda _: task)  # fmt: skip
    trajectory = await runner.run(EpisodeSpec(task_id, sample_index=0, group_id="conformance"))
    assert not trajectory.masked, f"an episode of hostile calls was masked: {trajectory.error}"
    assert trajectory.metrics.tool_errors >= len(gold), (
        f"{len(gold)} hostile calls, metrics.tool_errors {trajectory.metrics.tool_errors}"
    )


async def _check_call_forms(ctx: _Context) -> None:
    """A step takes calls as ToolCall objects, flat dicts and OpenAI's nested form alike."""
    flat, nested = _unknown_call(), _unknown_call()
    calls: list[ToolCall | dict[str, Any]] = [
        {"id": flat.id, "name": flat.name, "arguments": "{}"},
        {"id": nested.id, "type": "function",
         "function": {"name": nested.name, "arguments": "{}"}},
    ]  # fmt: skip
    async with ctx.session(await ctx.task_id()) as session:
        result = await session.step(calls)
    _check_observations(result, [flat, nested], "calls given as dicts")
    assert [o.name for o in result.observations] == [flat.name, nested.name], (
        f"observations name {[o.name for o in result.observations]}"
    )


async def _check_request_id_replay(ctx: _Context) -> None:
    """A step repeated with its request_id returns the stored reply without a rerun."""
    async with ctx.session(await ctx.task_id()) as session:
        calls = [_unknown_call()]
        first = await session.step(calls, request_id="conformance-replay")
        again = await session.step(calls, request_id="conformance-replay")
        assert again == first, "a repeated request_id gave another reply"
        turns = (await session.info()).metrics.turns
        assert turns == 1, f"a replayed step ran again: metrics.turns {turns}"


async def _check_abort(ctx: _Context) -> None:
    """abort() frees the session: a later step raises a SessionError; aborting twice is fine."""
    async with ctx.session(await ctx.task_id()) as session:
        await session.abort()
        await _expect_error(session.step([_unknown_call()]), SessionError, "step after abort")
        await session.abort()
        try:
            status = await session.info()
        except SessionError:
            return
        assert status.closed, f"an aborted session is not closed: {status!r}"


async def _check_close_after_abort(ctx: _Context) -> None:
    """close() after abort() raises SessionClosed (an aborted episode has no result), and
    abort() after close() keeps the result."""
    async with ctx.session(await ctx.task_id()) as session:
        await session.abort()
        await _expect_error(session.close(), SessionClosed, "close after abort")
        await _expect_error(session.close(), SessionClosed, "a second close after abort")
    async with ctx.session(await ctx.task_id()) as session:
        closed = await session.close()
        await session.abort()
        assert await session.close() == closed, "abort after close changed close()'s result"


async def _check_malformed_step(ctx: _Context) -> None:
    """A step the HTTP API refuses (a call without a name, a request_id over 128
    characters) raises InvalidRequest, counts no turn, and the session keeps working."""
    async with ctx.session(await ctx.task_id()) as session:
        nameless: list[ToolCall | dict[str, Any]] = [{"id": "call-nameless", "arguments": "{}"}]
        await _expect_error(session.step(nameless), InvalidRequest, "a call without a name")
        await _expect_error(session.step([_unknown_call()], request_id="r" * 129),
                            InvalidRequest, "a 129-character request_id")  # fmt: skip
        status = await session.info()
        assert status.metrics.turns == 0, f"refused steps counted {status.metrics.turns} turns"
        assert not status.done and not status.closed, f"refused steps ended it: {status!r}"
        calls = [_unknown_call()]
        result = await session.step(calls, request_id="r" * 128)
        _check_observations(result, calls, "a step after refused steps")
        turns = (await session.info()).metrics.turns
        assert turns == 1, f"one step after refused ones, metrics.turns {turns}"


async def _check_bad_session_id(ctx: _Context) -> None:
    """A client-chosen session_id the HTTP API refuses (characters outside
    ``[A-Za-z0-9._~-]``, longer than 128) raises InvalidRequest on open."""
    task_id = await ctx.task_id()

    async def await_open(session_id: str) -> object:
        session = await ctx.client.open(task_id, session_id=session_id)
        await session.abort()
        return session.session_id

    for bad in ("has space/slash", "s" * 200, ""):
        await _expect_error(await_open(bad), InvalidRequest, f"open(session_id={bad!r})")


async def _check_session_info(ctx: _Context) -> None:
    """info() of a session: its id, environment and task, turns counted, closed after close."""
    task_id = await ctx.task_id()
    async with ctx.session(task_id) as session:
        status = await session.info()
        assert isinstance(status, SessionInfo), f"info() returned {type(status).__name__}"
        assert status.session_id == session.session_id, f"info() names {status.session_id!r}"
        assert status.env == ctx.client.name, f"info().env {status.env!r} != {ctx.client.name!r}"
        assert status.task_id == task_id, f"info().task_id {status.task_id!r} != {task_id!r}"
        assert not status.done and not status.closed, f"a new session is over: {status!r}"
        assert status.metrics.turns == 0, f"a new session has {status.metrics.turns} turns"
        await session.step([_unknown_call()])
        status = await session.info()
        assert status.metrics.turns == 1 and status.metrics.tool_errors == 1, (
            f"after one failed call: {status.metrics!r}"
        )
        await session.close()
        status = await session.info()
        assert status.closed and status.stop_reason == "closed", f"after close(): {status!r}"


async def _check_client_session_id(ctx: _Context) -> None:
    """A client-chosen session_id is the session's id everywhere."""
    session_id = f"conformance-{uuid.uuid4().hex}"
    async with ctx.session(await ctx.task_id(), session_id=session_id) as session:
        assert session.session_id == session_id, f"opened as {session.session_id!r}"
        assert (await session.reset()).session_id == session_id, "reset() names another id"
        assert (await session.info()).session_id == session_id, "info() names another id"


class _Boom(Exception):
    pass


async def _check_context_manager(ctx: _Context) -> None:
    """``async with client.open(...)`` closes (scores) on a clean exit and aborts when the
    block raises, letting the exception through."""
    task_id = await ctx.task_id()
    async with ctx.client.open(task_id) as session:
        await session.step([_unknown_call()])
    status = await session.info()
    assert status.closed, f"a clean exit left the session open: {status!r}"
    closed = await session.close()  # idempotent: the result the exit scored
    assert closed.metrics.turns == 1, f"the exit's close lost the step: {closed.metrics!r}"
    await _expect_error(session.step([_unknown_call()]), SessionClosed, "step after the block")

    inner: list[SessionHandle] = []

    async def raising_block() -> None:
        async with ctx.client.open(task_id) as session:
            inner.append(session)
            raise _Boom("raised inside the block")

    await _expect_error(raising_block(), _Boom, "a block that raised")
    await _expect_error(inner[0].step([_unknown_call()]), SessionError,
                        "step after a block that raised")  # fmt: skip


async def _check_seeded_open(ctx: _Context) -> None:
    """Opening without a task id picks a listed task, the same one for the same seed."""
    listed = set(await ctx.client.task_ids())
    chosen = []
    for _ in range(2):
        async with ctx.session(None, seed=1234) as session:
            chosen.append((await session.reset()).task_id)
    assert chosen[0] in listed, f"seed 1234 opened unlisted task {chosen[0]!r}"
    assert chosen[0] == chosen[1], f"seed 1234 opened {chosen[0]!r}, then {chosen[1]!r}"


async def _check_sessions_independent(ctx: _Context) -> None:
    """Two sessions of one task share no state: a step in one leaves the other at turn 0."""
    task_id = await ctx.task_id()
    async with ctx.session(task_id) as first, ctx.session(task_id) as second:
        assert first.session_id != second.session_id, "two sessions got the same id"
        await first.step([_unknown_call()])
        turns = (await second.info()).metrics.turns
        assert turns == 0, f"a step in one session counted {turns} turn(s) in the other"
        await first.close()
        assert not (await second.info()).closed, "closing one session closed the other"


_FORK_PREFIX = 2  # gold calls the fork check steps before forking, at most


async def _fork_turns(ctx: _Context, task_id: str) -> tuple[list[ToolCall], ToolCall]:
    """The fork check's prefix (one call per turn) and the probe after it: the caller's
    ``fork_prefix``, else the task's gold calls but the last, up to two, where the client
    gives the task; the probe is the next gold call (an unknown tool when there is none)."""
    gold = list(ctx.fork_prefix) if ctx.fork_prefix is not None else None
    if gold is None:
        try:
            gold = (await ctx.client.task(task_id)).gold_actions
        except NotImplementedError:
            gold = []
    prefix = gold[: min(_FORK_PREFIX, max(len(gold) - 1, 0))]
    calls = [ToolCall(id=f"prefix-{i}", name=g.name, arguments=g.arguments)
             for i, g in enumerate(prefix)]
    rest = gold[len(prefix):]
    probe = (ToolCall(id="probe", name=rest[0].name, arguments=rest[0].arguments) if rest
             else ToolCall(id="probe", name="no_such_tool_probe"))
    return calls, probe


def _answer(result: StepResult) -> tuple[object, ...]:
    """What a step's answer says about the episode (no timings, no ids)."""
    return (
        [(o.name, o.content, o.is_error, o.truncated) for o in result.observations],
        result.done, result.stop_reason, result.reward, result.user_messages,
    )


async def _check_fork(ctx: _Context) -> None:
    """fork(3) after a short prefix: each child answers the next call as a fresh episode
    driven through the same prefix does; children go their own ways; ending the parent
    (an abort: no reward to wait for) leaves them usable; a repeated fork_id gives the
    same children; an ended session and n past MAX_FORK are refused. An environment may
    refuse to fork with
    NotDeterministic (MiniWoB's pages follow the clock): then the parent must be where
    it was and go on answering."""
    task_id = await ctx.task_id()
    prefix, probe = await _fork_turns(ctx, task_id)

    async def oracle() -> tuple[object, ...]:
        async with ctx.session(task_id) as fresh:
            for call in prefix:
                await fresh.step([call])
            return _answer(await fresh.step([probe]))

    async with ctx.session(task_id) as parent:
        for call in prefix:
            await parent.step([call])
        fork_id = f"conformance-{uuid.uuid4().hex[:12]}"
        fresh = asyncio.ensure_future(oracle())  # beside the fork: sandboxes, browsers wait
        try:
            children = await parent.fork(3, fork_id=fork_id)
        except BaseException as exc:
            fresh.cancel()
            with contextlib.suppress(BaseException):
                await fresh
            if not isinstance(exc, NotDeterministic):
                raise
            turns = (await parent.info()).metrics.turns
            assert turns == len(prefix), f"a refused fork left the parent at turn {turns}"
            answered = await parent.step([probe])
            assert [o.tool_call_id for o in answered.observations] == [probe.id], (
                "after a refused fork the parent does not answer"
            )
            return
        try:
            expected = await fresh
            ids = [child.session_id for child in children]
            assert len(set(ids)) == 3 and parent.session_id not in ids, f"children ids {ids}"
            for child in children:
                status = await child.info()
                assert status.metrics.turns == len(prefix) and not status.closed, (
                    f"a child starts at turn {status.metrics.turns} (closed={status.closed}), "
                    f"not the parent's {len(prefix)}"
                )
            assert _answer(await children[0].step([probe])) == expected, (
                "a child answered the next call otherwise than a fresh episode driven "
                "through the same prefix"
            )
            await children[1].step([_unknown_call()])
            turns = (await children[2].info()).metrics.turns
            assert turns == len(prefix), f"a sibling's steps counted {turns} turns in another"
            same = await parent.fork(3, fork_id=fork_id)
            assert [c.session_id for c in same] == ids, "a repeated fork_id gave other children"
            await _expect_error(children[2].fork(MAX_FORK + 1), InvalidRequest,
                                f"fork({MAX_FORK + 1})")
            await parent.abort()  # no reward to wait for: the parent ends all the same
            for child in children[1:]:
                assert _answer(await child.step([probe]))[0] == expected[0], (
                    "after the parent closed, a child answered the next call otherwise"
                )
            await _expect_error(parent.fork(1), SessionClosed, "fork of an ended session")
        finally:
            for child in children:
                with contextlib.suppress(Exception):
                    await child.abort()


Check = Callable[[_Context], Awaitable[None]]

#: every check by name, in the order they run (``skip`` takes these names)
CHECKS: dict[str, Check] = {
    "protocol": _check_protocol,
    "info": _check_info,
    "task_listing": _check_task_listing,
    "task": _check_task,
    "unknown_task": _check_unknown_task,
    "lifecycle": _check_lifecycle,
    "final_answer": _check_final_answer,
    "malformed_calls": _check_malformed_calls,
    "hostile_arguments": _check_hostile_arguments,
    "call_forms": _check_call_forms,
    "request_id_replay": _check_request_id_replay,
    "abort": _check_abort,
    "close_after_abort": _check_close_after_abort,
    "malformed_step": _check_malformed_step,
    "session_info": _check_session_info,
    "client_session_id": _check_client_session_id,
    "bad_session_id": _check_bad_session_id,
    "context_manager": _check_context_manager,
    "seeded_open": _check_seeded_open,
    "sessions_independent": _check_sessions_independent,
    "fork": _check_fork,
}


async def run_conformance(
    client: EnvironmentClient,
    *,
    task_ids: Sequence[str] | None = None,
    malformed_tool: str | None = None,
    fork_prefix: Sequence[GoldCall] | None = None,
    skip: Collection[str] = (),
    check_timeout_s: float = 300.0,
) -> ConformanceReport:
    """Run every check of :data:`CHECKS` (but ``skip``) against ``client``, one after another.

    ``task_ids``: the tasks sessions are opened on (the lifecycle check runs on each;
    default: the first listed task). ``malformed_tool``: the tool the malformed calls
    name (default: the first). ``fork_prefix``: the gold calls whose first ones (up to
    two, but the last) the fork check steps before forking, and whose next one probes
    the children (default: the task's own, where the client gives tasks; a remote
    client's caller passes them). A check failing or raising, or running past
    ``check_timeout_s``, is recorded and the next one runs.
    """
    unknown = set(skip) - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown check(s) {sorted(unknown)}; checks: {', '.join(CHECKS)}")
    ctx = _Context(client, task_ids, malformed_tool, fork_prefix)
    report = ConformanceReport(env=str(getattr(client, "name", type(client).__name__)))
    for name, check in CHECKS.items():
        if name in skip:
            continue
        try:
            await asyncio.wait_for(check(ctx), check_timeout_s)  # asyncio.timeout is 3.11+
        except AssertionError as exc:
            report.failures.append(ConformanceFailure(name, str(exc)))
        except asyncio.TimeoutError:
            report.failures.append(ConformanceFailure(name, f"ran past {check_timeout_s}s"))
        except Exception as exc:
            report.failures.append(ConformanceFailure(name, f"{type(exc).__name__}: {exc}"))
        else:
            report.passed.append(name)
    return report


async def check_client_conformance(
    client: EnvironmentClient,
    *,
    task_ids: Sequence[str] | None = None,
    malformed_tool: str | None = None,
    fork_prefix: Sequence[GoldCall] | None = None,
    skip: Collection[str] = (),
    check_timeout_s: float = 300.0,
) -> ConformanceReport:
    """:func:`run_conformance`, raising ``AssertionError`` that lists every failed check."""
    report = await run_conformance(
        client, task_ids=task_ids, malformed_tool=malformed_tool, fork_prefix=fork_prefix,
        skip=skip,
        check_timeout_s=check_timeout_s,
    )
    if not report.ok:
        raise AssertionError(str(report))
    return report

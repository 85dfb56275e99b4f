"""The suite catches a broken transport: each client here is today's in-process calc with
one behaviour of the protocol broken, and the suite must fail exactly the checks that
exercise it (and pass the rest, so it blames the right behaviour)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import envhub
from envhub.errors import ToolArgumentError
from envhub.protocol import EnvironmentClient, OpeningSession, SessionHandle
from envhub.runtime.session import Session
from envhub.task import Task
from envhub.testing.conformance import CHECKS, check_client_conformance, run_conformance
from envhub.types import (
    CloseResult,
    EnvironmentInfo,
    SessionInfo,
    SessionStart,
    StepResult,
    ToolCall,
)


class _BrokenSession:
    """Delegates to a real session except for the ``fault``."""

    def __init__(self, inner: SessionHandle, fault: str, tools: set[str]) -> None:
        self._inner, self._fault, self._tools = inner, fault, tools
        self._closes = 0

    @property
    def session_id(self) -> str:
        return self._inner.session_id

    @property
    def served_by(self) -> str | None:
        return self._inner.served_by

    async def reset(self) -> SessionStart:
        return await self._inner.reset()

    async def step(
        self,
        tool_calls: Sequence[ToolCall | dict[str, Any]],
        content: str | None = None,
        request_id: str | None = None,
    ) -> StepResult:
        if self._fault == "step_after_close" and self._closes:
            return StepResult(observations=[])
        if self._fault == "malformed_raises":
            for call in tool_calls:
                name = call.name if isinstance(call, ToolCall) else call["name"]
                if name not in self._tools:
                    raise ToolArgumentError(f"unknown tool {name!r}")
        if self._fault == "drops_dict_calls":
            tool_calls = [c for c in tool_calls if isinstance(c, ToolCall)]
        if self._fault == "untyped_step_errors":  # today's main before the wire-model check
            assert isinstance(self._inner, Session)
            request_id = None if request_id is None else request_id[:128]  # a long one runs
            if not all(isinstance(c, ToolCall) or "name" in c for c in tool_calls):
                self._inner.metrics.turns += 1  # counted, then pydantic's error escapes
                tool_calls = [ToolCall.model_validate(c) for c in tool_calls]
        return await self._inner.step(tool_calls, content, request_id)

    async def close(self) -> CloseResult:
        result = await self._inner.close()
        self._closes += 1
        if self._fault == "close_not_idempotent":
            return result.model_copy(update={"reward": result.reward + self._closes})
        return result

    async def abort(self) -> None:
        if self._fault == "abort_scores":  # abort as a close: a later close has a result
            await self._inner.close()
            return
        await self._inner.abort()

    async def info(self) -> SessionInfo:
        return await self._inner.info()

    async def fork(self, n: int = 1, *, fork_id: str | None = None) -> list[SessionHandle]:
        children = await self._inner.fork(n, fork_id=fork_id)
        if self._fault == "fork_shares_state":  # every child is the parent itself
            return [self] * n
        return [_BrokenSession(child, self._fault, self._tools) for child in children]

    async def __aenter__(self) -> SessionHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await (self.close() if exc[0] is None else self.abort())


class _BrokenClient:
    """A conforming client with one ``fault``."""

    def __init__(self, inner: EnvironmentClient, fault: str) -> None:
        self._inner, self._fault = inner, fault

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def version(self) -> str:
        return self._inner.version

    async def info(self) -> EnvironmentInfo:
        return await self._inner.info()

    async def task_ids(self, split: str | None = None) -> list[str]:
        return await self._inner.task_ids(split)

    async def task(self, task_id: str) -> Task:
        return await self._inner.task(task_id)

    def open(
        self,
        task_id: str | None = None,
        *,
        session_id: str | None = None,
        seed: int | None = None,
    ) -> OpeningSession:
        async def start() -> SessionHandle:
            if self._fault == "unknown_task_keyerror" and task_id is not None:
                if task_id not in await self._inner.task_ids():
                    raise KeyError(task_id)
            if self._fault == "any_session_id" and session_id is not None:
                inner = await self._inner.open(task_id, seed=seed)  # the id is ignored
                return _BrokenSession(inner, self._fault, set())
            inner = await self._inner.open(task_id, session_id=session_id, seed=seed)
            tools = {t["function"]["name"] for t in (await self._inner.info()).tools}
            return _BrokenSession(inner, self._fault, tools)

        return OpeningSession(start)

    async def aclose(self) -> None:
        await self._inner.aclose()


FAULTS = {
    "close_not_idempotent": {"lifecycle", "final_answer", "close_after_abort"},
    "step_after_close": {"lifecycle", "context_manager"},
    "unknown_task_keyerror": {"unknown_task"},
    "drops_dict_calls": {"call_forms", "malformed_step"},
    "any_session_id": {"client_session_id", "bad_session_id"},
    "untyped_step_errors": {"malformed_step"},
    "abort_scores": {"close_after_abort"},
    "fork_shares_state": {"fork"},
    "malformed_raises": {
        "lifecycle", "final_answer", "malformed_calls", "hostile_arguments", "call_forms",
        "request_id_replay", "abort", "malformed_step", "session_info", "context_manager",
        "sessions_independent", "fork",
    },
}  # fmt: skip


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_the_suite_fails_exactly_the_broken_behaviour(fault: str) -> None:
    client = _BrokenClient(envhub.make("calc"), fault)
    try:
        report = await run_conformance(client)
    finally:
        await client.aclose()
    assert set(report.failed) == FAULTS[fault], str(report)
    assert set(report.passed) == set(CHECKS) - FAULTS[fault]


async def test_check_client_conformance_raises_listing_every_failed_check() -> None:
    client = _BrokenClient(envhub.make("calc"), "step_after_close")
    try:
        with pytest.raises(AssertionError) as raised:
            await check_client_conformance(client)
    finally:
        await client.aclose()
    message = str(raised.value)
    assert "2 conformance check(s) failed for calc" in message
    assert "\n  lifecycle: step after close returned" in message
    assert "\n  context_manager: step after the block returned" in message


async def test_the_unbroken_wrapper_conforms() -> None:
    """The wrapper itself is faithful: without a fault every check passes."""
    client = _BrokenClient(envhub.make("calc"), "none")
    try:
        report = await check_client_conformance(client)
    finally:
        await client.aclose()
    assert report.passed == list(CHECKS)


async def test_unknown_check_names_are_refused() -> None:
    with pytest.raises(ValueError, match="no_such_check"):
        await run_conformance(envhub.make("calc"), skip={"no_such_check"})

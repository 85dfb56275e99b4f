"""Fake sandbox backends for the admission tests, loaded by ``module:Class`` like any
plugin backend, and a calc environment whose episodes each open one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from envhub_calc import CalcEnv

from envhub.sandboxes import Sandbox, SandboxSpec, open_sandbox
from envhub.sandboxes.base import Argv, RawResult
from envhub.task import Task
from envhub.types import Message


class SlowSandbox(Sandbox):
    """Takes ``delay_s`` to start; records when each start began and how many ran at once."""

    backend = "test-slow"
    isolated = False
    delay_s: ClassVar[float] = 0.05
    starts: ClassVar[list[float]] = []
    in_flight: ClassVar[int] = 0
    peak: ClassVar[int] = 0

    @classmethod
    def reset_record(cls, delay_s: float = 0.05) -> None:
        cls.delay_s, cls.starts, cls.in_flight, cls.peak = delay_s, [], 0, 0

    async def _start(self) -> None:
        cls = SlowSandbox  # the record is shared with BrokenSandbox
        cls.starts.append(time.monotonic())
        cls.in_flight += 1
        cls.peak = max(cls.peak, cls.in_flight)
        try:
            await asyncio.sleep(cls.delay_s)
        finally:
            cls.in_flight -= 1

    async def _close(self) -> None:
        return None

    async def _run(
        self,
        argv: Argv,
        *,
        timeout: float,
        stdin: bytes | None,
        workdir: str | None,
        env: Mapping[str, str] | None,
        limit: int,
    ) -> RawResult:
        return RawResult(exit_code=0)


class BrokenSandbox(SlowSandbox):
    """The engine refuses every start (an ``OSError``, as a dead docker socket gives)."""

    backend = "test-slow"  # the same limiter: failures hold and give back its slots too

    async def _start(self) -> None:
        await super()._start()
        raise OSError("engine refused the container (injected)")


class SandboxedCalc(CalcEnv):
    """calc whose every episode opens a sandbox of backend ``sandbox`` at reset."""

    name = "sandboxed-calc"

    def __init__(self, sandbox: str = "tests.sandboxes.slow_backends:SlowSandbox", **kw: Any):
        super().__init__(**kw)
        self.sandbox = sandbox

    async def reset(self, task: Task) -> list[Message]:
        async with open_sandbox(SandboxSpec(), self.sandbox) as sb:
            await sb.exec("true")
        return await super().reset(task)

"""Contract checks for environments, used by plugin test suites and ``envhub check``.

For every selected task, replaying the gold actions must score 1 and doing nothing must
score 0: a reward function that fails either way would silently poison training.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from envhub.local import LocalEnvironment, make
from envhub.task import Task
from envhub.types import CloseResult, ToolCall

__all__ = [
    "CheckFailure",
    "CheckReport",
    "check_environment",
    "check_tasks",
    "replay_gold",
    "run_noop",
]


class CheckFailure(BaseModel):
    task_id: str
    policy: str  # "reference" or "noop"
    reward: float | None = None
    expected: float
    detail: str = ""


class CheckReport(BaseModel):
    env: str
    checked: int
    failures: list[CheckFailure] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


async def replay_gold(env: LocalEnvironment, task: Task) -> CloseResult:
    """Run one episode that calls the task's gold actions in order, one per turn."""
    session = await env.open(task.id)
    try:
        for index, call in enumerate(task.gold_actions):
            result = await session.step(
                [ToolCall(id=f"gold-{index}", name=call.name, arguments=call.arguments)]
            )
            if result.done:
                break
    except BaseException:
        await session.abort()
        raise
    return await session.close()


async def run_noop(env: LocalEnvironment, task: Task) -> CloseResult:
    """Run one episode whose only turn is an empty final answer."""
    session = await env.open(task.id)
    try:
        await session.step([], content="")
    except BaseException:
        await session.abort()
        raise
    return await session.close()


async def _check_one(env: LocalEnvironment, task: Task) -> list[CheckFailure]:
    failures: list[CheckFailure] = []
    for policy, runner, expected in (("reference", replay_gold, 1.0), ("noop", run_noop, 0.0)):
        try:
            result = await runner(env, task)
        except Exception as exc:
            failures.append(
                CheckFailure(
                    task_id=task.id,
                    policy=policy,
                    expected=expected,
                    detail=f"{type(exc).__name__}: {exc}",
                )
            )
            continue
        if result.reward != expected:
            failures.append(
                CheckFailure(
                    task_id=task.id,
                    policy=policy,
                    reward=result.reward,
                    expected=expected,
                    detail=f"stop_reason={result.stop_reason} components={result.components}",
                )
            )
    return failures


async def check_tasks(
    env: LocalEnvironment, tasks: Iterable[Task], *, concurrency: int = 8
) -> CheckReport:
    """Check tasks concurrently (bounded) and collect every failure."""
    task_list = list(tasks)
    limiter = asyncio.Semaphore(concurrency)

    async def bounded(task: Task) -> list[CheckFailure]:
        async with limiter:
            return await _check_one(env, task)

    results = await asyncio.gather(*(bounded(t) for t in task_list))
    return CheckReport(
        env=env.name, checked=len(task_list), failures=[f for r in results for f in r]
    )


def check_environment(
    env: str | LocalEnvironment,
    *,
    task_ids: Iterable[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    concurrency: int = 8,
    **options: Any,
) -> CheckReport:
    """Blocking check for tests: raises ``AssertionError`` listing the failing tasks."""
    local = env if isinstance(env, LocalEnvironment) else make(env, **options)
    tasks = (
        [local.tasks.get(t) for t in task_ids] if task_ids is not None else local.tasks.split(split)
    )
    if limit is not None:
        tasks = tasks[:limit]
    report = asyncio.run(check_tasks(local, tasks, concurrency=concurrency))
    if not report.ok:
        lines = "\n".join(
            f"  {f.task_id} [{f.policy}] reward={f.reward} expected={f.expected} {f.detail}"
            for f in report.failures[:20]
        )
        raise AssertionError(f"{len(report.failures)} check failure(s) in {report.env}:\n{lines}")
    return report

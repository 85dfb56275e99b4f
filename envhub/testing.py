"""Contract checks for environments, for plugin test suites (``envhub check`` in code).

For every selected task, replaying the gold actions must score 1 and doing nothing must
score 0 (:mod:`envhub.rollout.check` runs both through the rollout engine).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from envhub.local import LocalEnvironment, make
from envhub.rollout.check import CheckFailure, CheckReport, check_tasks

__all__ = ["CheckFailure", "CheckReport", "check_environment", "check_tasks"]


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
    ids = list(task_ids) if task_ids is not None else local.task_ids(split)
    if limit is not None:
        ids = ids[:limit]
    report = asyncio.run(check_tasks(local, ids, concurrency=concurrency))
    if not report.ok:
        lines = "\n".join(
            f"  {f.task_id} [{f.policy}] reward={f.reward} expected={f.expected} {f.detail}"
            for f in report.failures[:20]
        )
        raise AssertionError(f"{len(report.failures)} check failure(s) in {report.env}:\n{lines}")
    return report

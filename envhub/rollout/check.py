"""Environment contract check: the reference policy must score 1, a no-op policy 0.

Runs through the same episode runner and dispatcher as real rollouts, so it checks the
path training data takes. Failing either way means a reward function that would silently
poison training. Environment failures are not retried here: they are reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pydantic import BaseModel, Field

from envhub.policies.base import Policy
from envhub.policies.reference import NoopPolicy, ReferencePolicy
from envhub.protocol import EnvironmentClient
from envhub.rollout.dispatcher import dispatch, plan_episodes
from envhub.rollout.episode import EpisodeRunner
from envhub.trajectory import Trajectory

__all__ = ["CheckFailure", "CheckReport", "check_tasks"]


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

    @property
    def failing_tasks(self) -> list[str]:
        return sorted({f.task_id for f in self.failures})


async def check_tasks(
    env: EnvironmentClient,
    task_ids: Iterable[str],
    *,
    concurrency: int = 32,
    on_result: Callable[[Trajectory], None] | None = None,
    tasks_from: EnvironmentClient | None = None,
) -> CheckReport:
    """Run the reference and the no-op policy once on every task and collect the failures.

    The reference policy replays each task's gold actions, so ``env``'s transport must
    give whole tasks (:meth:`EnvironmentClient.task`: in-process ones do), or
    ``tasks_from`` must (a local copy of the environment a server, pool or fleet runs)."""
    ids = list(task_ids)
    version = (await env.info()).version
    failures: list[CheckFailure] = []
    checks: list[tuple[str, Policy, float]] = [
        ("reference", ReferencePolicy(), 1.0),
        ("noop", NoopPolicy(), 0.0),
    ]
    for name, policy, expected in checks:
        runner = EpisodeRunner(
            env, policy, env_version=version, max_env_attempts=1, tasks_from=tasks_from
        )

        def judge(trajectory: Trajectory, name: str = name, expected: float = expected) -> None:
            if on_result is not None:
                on_result(trajectory)
            if trajectory.masked:
                error = trajectory.error
                detail = f"{error.kind}: {error.message}" if error else "masked"
            elif trajectory.reward != expected:
                components = trajectory.reward_components
                detail = f"stop_reason={trajectory.stop_reason} components={components}"
            else:
                return
            failures.append(
                CheckFailure(
                    task_id=trajectory.task_id,
                    policy=name,
                    reward=trajectory.reward,
                    expected=expected,
                    detail=detail,
                )
            )

        await dispatch(runner, plan_episodes(ids, 1), concurrency=concurrency, on_result=judge)
    failures.sort(key=lambda f: (f.task_id, f.policy))
    return CheckReport(env=env.name, checked=len(ids), failures=failures)

"""Environment contract check: the reference policy must score 1, a no-op policy 0
(or, for a task where answering without acting is right, the reward its metadata names in
``expected_noop_reward``: a benchmark's irrelevance rule).

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
from envhub.tools import schema_gaps
from envhub.trajectory import EnvRef, Trajectory

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
    tool_gaps: list[str] = Field(
        default_factory=list,
        description="what the tool schemas leave the model to guess (envhub.tools.schema_gaps); "
        "warnings, not failures",
    )

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
    info = await env.info()
    failures: list[CheckFailure] = []
    noop_expected = await _expected_noop_rewards(tasks_from or env, ids)
    checks: list[tuple[str, Policy, dict[str, float]]] = [
        ("reference", ReferencePolicy(), {}),
        ("noop", NoopPolicy(), noop_expected),
    ]
    for name, policy, expected_by_task in checks:
        runner = EpisodeRunner(
            env, policy, env_ref=EnvRef.of(env.name, info), max_env_attempts=1,
            tasks_from=tasks_from,
        )

        def judge(
            trajectory: Trajectory, name: str = name, by_task: dict[str, float] = expected_by_task
        ) -> None:
            expected = by_task.get(trajectory.task_id, 1.0 if name == "reference" else 0.0)
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
    return CheckReport(
        env=env.name, checked=len(ids), failures=failures, tool_gaps=schema_gaps(info.tools)
    )


async def _expected_noop_rewards(source: EnvironmentClient, ids: list[str]) -> dict[str, float]:
    """The no-op reward each task expects where its metadata says (``expected_noop_reward``);
    0 elsewhere, and for every task of a transport that does not publish tasks."""
    expected: dict[str, float] = {}
    for task_id in ids:
        try:
            task = await source.task(task_id)
        except NotImplementedError:
            return {}
        value = task.metadata.get("expected_noop_reward")
        if value is not None:
            expected[task_id] = float(value)
    return expected

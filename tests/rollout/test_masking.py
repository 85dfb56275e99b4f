"""Environment failures: retried on a fresh session, then masked (never scored zero)."""

from __future__ import annotations

import envhub
from envhub.policies import ReferencePolicy
from tests.rollout.faulty_envs import FlakyOnce
from tests.rollout.helpers import run_episodes


async def test_sandbox_failure_is_masked_after_retries() -> None:
    env = envhub.make("tests.rollout.faulty_envs:SandboxDies", num_tasks=10)
    trajectories = await run_episodes(
        env, ReferencePolicy(), (await env.task_ids(None))[:3], max_env_attempts=3
    )
    assert len(trajectories) == 3
    for trajectory in trajectories:
        assert trajectory.masked and trajectory.reward is None
        assert trajectory.stop_reason == "env_error"
        assert trajectory.error is not None and trajectory.error.kind == "sandbox_error"
        assert "injected" in trajectory.error.message
        assert trajectory.metrics.episode_attempts == 3


async def test_flaky_environment_succeeds_on_retry() -> None:
    FlakyOnce.resets.clear()
    env = envhub.make("tests.rollout.faulty_envs:FlakyOnce", num_tasks=10)
    task_ids = (await env.task_ids(None))[:4]
    trajectories = await run_episodes(env, ReferencePolicy(), task_ids, max_env_attempts=2)
    assert all(not t.masked and t.reward == 1.0 for t in trajectories)
    assert all(t.metrics.episode_attempts == 2 for t in trajectories)
    assert all(FlakyOnce.resets[t] == 2 for t in task_ids)


async def test_reference_policy_with_wrong_actions_is_deterministic() -> None:
    env = envhub.make("calc", num_tasks=50)
    task_ids = (await env.task_ids(None))[:25]
    runs = [
        await run_episodes(env, ReferencePolicy(wrong_action_p=0.3, seed=7), task_ids, group_size=2)
        for _ in range(2)
    ]
    rewards = [sorted((t.task_id, t.sample_index, t.reward) for t in run) for run in runs]
    assert rewards[0] == rewards[1]
    values = {r for _, _, r in rewards[0]}
    assert values == {0.0, 1.0}  # a mix of good and bad episodes

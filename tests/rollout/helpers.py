"""Running a handful of episodes against a scripted server, for the rollout tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from envhub.policies import OpenAIPolicy, RetryPolicy
from envhub.protocol import EnvironmentClient
from envhub.rollout.dispatcher import dispatch, plan_episodes
from envhub.rollout.episode import EpisodeRunner
from envhub.trajectory import Trajectory

FAST_RETRY = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05)


def openai_policy(*base_urls: str, **options: Any) -> OpenAIPolicy:
    options.setdefault("retry", FAST_RETRY)
    return OpenAIPolicy("scripted", list(base_urls), **options)


async def run_episodes(
    env: EnvironmentClient,
    policy: Any,
    task_ids: list[str],
    *,
    group_size: int = 1,
    concurrency: int = 8,
    **runner_options: Any,
) -> list[Trajectory]:
    runner = EpisodeRunner(env, policy, **runner_options)
    results: list[Trajectory] = []
    try:
        await dispatch(
            runner,
            plan_episodes(task_ids, group_size),
            concurrency=concurrency,
            on_result=results.append,
        )
    finally:
        await policy.aclose()
    return results


async def eventually(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Wait until ``condition()`` holds (polling), failing the test after ``timeout_s``."""
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")

"""A fork of a Reasoning Gym episode is a copy (the generated entry, what was answered):
each child is scored on its own answer against the parent's entry."""

from __future__ import annotations

import envhub
from envhub.testing import call_tool


async def test_children_are_scored_on_their_own_answers() -> None:
    env = envhub.make("reasoning_gym", datasets="basic_arithmetic", size=1, score_workers=1)
    try:
        task = await env.task((await env.task_ids())[0])
        async with env.open(task.id) as parent:
            right, wrong = await parent.fork(2)
            await call_tool(right, "answer", answer=str(task.answer))
            await call_tool(wrong, "answer", answer="not the answer")
            assert (await right.close()).reward == 1.0
            assert (await wrong.close()).reward == 0.0
            assert (await parent.close()).reward == 0.0  # the parent never answered
    finally:
        await env.aclose()

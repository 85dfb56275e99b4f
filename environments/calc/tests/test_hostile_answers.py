"""The shared hostile-answer corpus (:mod:`envhub.testing.hostile`) against calc: each text goes
through the calculator (the model's tool input reaches its parser too) and is then the
final answer. Every episode is scored as a plain wrong answer, nothing runs on the host,
and the episodes scored afterwards get a clean run's rewards."""

from __future__ import annotations

import envhub
from envhub.task import GoldCall
from envhub.testing import check_hostile_answers


def _calculate_then_answer(text: str) -> list[GoldCall]:
    return [
        GoldCall(name="calculate", arguments={"expression": text}),
        GoldCall(name="answer", arguments={"value": text}),
    ]


async def test_hostile_answers_score_as_a_plain_wrong_answer() -> None:
    env = envhub.make("calc")
    task_id = (await env.task_ids())[0]  # 805 - 273 = 532: no corpus text reads as 532
    await check_hostile_answers(env, task_id, _calculate_then_answer, plain_wrong="0")

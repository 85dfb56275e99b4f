"""The shared hostile-answer corpus (:mod:`envhub.testing.hostile`) against BFCL: in a multi-turn
entry each text is a file's name and content, a directory, and both arguments of a
MathAPI call (they reach BFCL's live backends and, replayed, its checker's ``eval``), then
the final message; in a single-turn entry it is both arguments of the one function (BFCL's
AST checker) and the final message. Every episode is scored as a plain wrong answer,
nothing runs on the host, and the episodes scored afterwards get a clean run's rewards."""

from __future__ import annotations

import pytest

import envhub
from envhub import GoldCall
from envhub.testing import check_hostile_answers


def _through_the_backends(text: str) -> list[GoldCall]:
    return [
        GoldCall(name="touch", arguments={"file_name": text}),
        GoldCall(name="echo", arguments={"content": text, "file_name": text}),
        GoldCall(name="mkdir", arguments={"dir_name": text}),
        GoldCall(name="round_number", arguments={"number": text, "decimal_places": text}),
        GoldCall(name="", arguments={"content": text}),
    ]


def _as_the_arguments(text: str) -> list[GoldCall]:
    return [
        GoldCall(name="calculate_triangle_area", arguments={"base": text, "height": text}),
        GoldCall(name="", arguments={"content": text}),
    ]


@pytest.mark.parametrize(
    ("category", "task_id", "answer_calls"),
    [
        ("base", "multi_turn_base_15", _through_the_backends),  # file system and MathAPI
        ("simple", "simple_python_0", _as_the_arguments),  # base 10, height 5
    ],
)
async def test_hostile_answers_score_as_a_plain_wrong_answer(
    category: str, task_id: str, answer_calls: object
) -> None:
    env = envhub.make("bfcl", categories=category)
    await check_hostile_answers(env, task_id, answer_calls, plain_wrong="0")  # type: ignore[arg-type]

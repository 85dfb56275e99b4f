"""The shared hostile-answer corpus (:mod:`envhub.testing.hostile`) against sql: each text runs
through ``run_sql`` (the model's tool input reaches sqlite too) and is then the submitted
query. Every episode is scored as a plain wrong answer, nothing runs on the host, and
the episodes scored afterwards get a clean run's rewards; with the query workers (the
default) and in a bubblewrap sandbox."""

from __future__ import annotations

import shutil

import pytest

import envhub
from envhub.task import GoldCall
from envhub.testing import check_hostile_answers


def _run_then_submit(text: str) -> list[GoldCall]:
    return [
        GoldCall(name="run_sql", arguments={"query": text}),
        GoldCall(name="submit_sql", arguments={"query": text}),
    ]


@pytest.mark.parametrize(
    "sandbox",
    [
        None,
        pytest.param(
            "bwrap",
            marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap"),
        ),
    ],
)
async def test_hostile_answers_score_as_a_plain_wrong_answer(sandbox: str | None) -> None:
    env = envhub.make("sql", sandbox=sandbox)
    await check_hostile_answers(env, "chinook-0000", _run_then_submit, plain_wrong="SELECT 0")

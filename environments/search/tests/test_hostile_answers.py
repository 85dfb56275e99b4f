"""The shared hostile-answer corpus (:mod:`envhub.testing.hostile`) against search: each text is
a ``search`` query (the model's tool input reaches FTS5's and bm25s's query parsers) and
then the answer. Every episode is scored as a plain wrong answer, nothing runs on the
host, and the episodes scored afterwards get a clean run's rewards, with both
retrievers."""

from __future__ import annotations

import pytest

import envhub
from envhub.task import GoldCall
from envhub.testing import check_hostile_answers


def _search_then_answer(text: str) -> list[GoldCall]:
    return [
        GoldCall(name="search", arguments={"query": text}),
        GoldCall(name="answer", arguments={"text": text}),
    ]


@pytest.mark.parametrize("retriever", ["fts5", "bm25s"])
async def test_hostile_answers_score_as_a_plain_wrong_answer(retriever: str) -> None:
    env = envhub.make("search", retriever=retriever)
    # scored by exact match on the capital of Aruba (Oranjestad): no corpus text is one
    await check_hostile_answers(
        env, "search-single-capital-ABW", _search_then_answer, plain_wrong="0"
    )

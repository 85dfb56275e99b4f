"""Hostile search calls are the model's outcome: readable error observations (or an empty
result), never an exception that masks the episode; an episode made of them is scored.

Both retrievers take the same queries: FTS5's query language and bm25s's tokenizer must
see only plain words, whatever the model sends.
"""

from __future__ import annotations

import pytest

import envhub
from envhub.task import GoldCall
from envhub.testing import call_tool, replay_calls

RETRIEVERS = ["fts5", "bm25s"]
NO_WORDS = "the query has no words to search for"
#: what the session answers, before any tool runs, for arguments holding a lone surrogate
NOT_UNICODE = "not valid Unicode"

#: (query, what the observation says, whether it is an error)
QUERIES = [
    ("", NO_WORDS, False),
    ("\x00", NO_WORDS, False),
    ("\ud800", NOT_UNICODE, True),
    ('"', NO_WORDS, False),
    ("*^%", NO_WORDS, False),
    ("\U0001f600" * 300, NO_WORDS, False),
    ("AND OR NOT NEAR", "[1] id=", False),  # FTS5 operators are only words here
    ("NEAR(france paris, 2) title:capital", "[1] id=", False),
    ("'; DROP TABLE passages; --", "[1] id=", False),
    ("a" * 1001, "the query is 1001 characters long; the limit is 1000", True),
]
#: (doc_id, what the error observation says)
DOC_IDS = [
    ("", "no document ''"),
    ("\ud800", NOT_UNICODE),
    ("\x00", "no document '\\x00'"),
    ("../../../etc/passwd", "no document '../../../etc/passwd'"),
    ("%", "no document '%'"),
    ("country/FRA' OR '1'='1", "no document"),
]


@pytest.mark.parametrize("retriever", RETRIEVERS)
async def test_hostile_queries_and_ids_are_plain_results_or_readable_errors(
    retriever: str,
) -> None:
    env = envhub.make("search", retriever=retriever)
    session = await env.open((await env.task_ids())[0])
    result = await session.step(
        [
            *(
                {"id": f"q{i}", "name": "search", "arguments": {"query": q, "k": 3}}
                for i, (q, _, _) in enumerate(QUERIES)
            ),
            *(
                {"id": f"d{i}", "name": "open", "arguments": {"doc_id": d}}
                for i, (d, _) in enumerate(DOC_IDS)
            ),
            {"id": "k", "name": "search", "arguments": {"query": "France", "k": 10**30}},
        ]
    )
    expected = [(text, error) for _, text, error in QUERIES]
    expected += [(text, True) for _, text in DOC_IDS]
    expected += [("k must be between 1 and 20", True)]
    for (text, error), observation in zip(expected, result.observations, strict=True):
        assert observation.is_error == error, observation.content
        assert text in observation.content, observation.content
    still = await call_tool(session, "open", doc_id="country/FRA")
    assert still.observations[0].content.startswith("# France (id=country/FRA)")
    await session.close()


@pytest.mark.parametrize("retriever", RETRIEVERS)
async def test_an_episode_of_hostile_calls_is_scored_not_masked(retriever: str) -> None:
    env = envhub.make("search", retriever=retriever)
    task_id = (await env.task_ids())[0]
    calls = [
        GoldCall(name="search", arguments={"query": "a" * 1001}),
        GoldCall(name="open", arguments={"doc_id": "\ud800"}),
        GoldCall(name="search", arguments={"query": "France", "k": "many"}),  # wrong type
        GoldCall(name="browse", arguments={"url": "http://127.0.0.1:8000/metrics"}),
        GoldCall(name="answer", arguments={"text": "\ud800"}),  # refused: not text
        GoldCall(name="answer", arguments={"text": "\x00\U0001f600" * 1000}),
    ]
    trajectory = await replay_calls(env, task_id, calls)
    assert not trajectory.masked, trajectory.error
    assert trajectory.metrics.episode_attempts == 1
    assert trajectory.stop_reason == "terminal_tool"
    assert trajectory.reward == 0.0
    assert trajectory.reward_components["exact_match"] == 0.0
    assert trajectory.metrics.tool_errors == len(calls) - 1

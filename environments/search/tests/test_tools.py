"""The tools as a model meets them: search, open and answer, including bad input."""

from __future__ import annotations

import pytest

import envhub
from envhub.errors import InvalidRequest

TASK = "search-single-capital-FRA"


@pytest.fixture(scope="module")
def env() -> envhub.LocalEnvironment:
    return envhub.make("search")


async def test_search_ranks_passages_with_ids_and_titles(call, env) -> None:
    session = await env.open(TASK)
    obs = await call(session, "search", query="France capital", k=3)
    assert not obs.is_error
    first = obs.content.split("\n\n")[0]
    assert first.startswith("[1] id=country/FRA#") and "title='France'" in first
    assert "Paris" in first
    assert obs.content.count("\n[") <= 2  # k=3 results at most


async def test_open_returns_the_whole_article(call, env) -> None:
    session = await env.open(TASK)
    for doc_id in ("country/FRA", "country/FRA#0"):  # a passage id opens its article
        obs = await call(session, "open", doc_id=doc_id)
        assert not obs.is_error
        assert obs.content.startswith("# France (id=country/FRA)")
        assert "Paris" in obs.content and "Euro" in obs.content
    missing = await call(session, "open", doc_id="country/XXX")
    assert missing.is_error and "no document 'country/XXX'" in missing.content


@pytest.mark.parametrize("query", ["", "   ", "?!() ::"])
async def test_empty_queries_say_no_results(call, env, query: str) -> None:
    session = await env.open(TASK)
    obs = await call(session, "search", query=query)
    assert not obs.is_error
    assert obs.content.startswith("No results: the query has no words")


async def test_absurd_query_says_no_results(call, env) -> None:
    session = await env.open(TASK)
    obs = await call(session, "search", query="qzxvbnmw plorkqua")
    assert not obs.is_error
    assert obs.content == "No results for 'qzxvbnmw plorkqua'. Try other or fewer keywords."


@pytest.mark.parametrize("query", [
    'France" OR capital:(', "NEAR(France capital)", "capital* ^France -Paris",
    "France'; DROP TABLE x",
])
async def test_fts_syntax_in_queries_is_harmless(call, env, query: str) -> None:
    """Quotes, operators and SQL are plain words: the France article still ranks."""
    session = await env.open(TASK)
    obs = await call(session, "search", query=query, k=10)
    assert not obs.is_error
    assert obs.content.startswith("[1] id=") and "id=country/FRA#" in obs.content


async def test_huge_query_is_rejected_cleanly(call, env) -> None:
    session = await env.open(TASK)
    obs = await call(session, "search", query="capital " * 12_800)  # 100 KB
    assert obs.is_error
    assert "the query is 102400 characters long; the limit is 1000" in obs.content
    assert len(obs.content) < 300
    after = await call(session, "search", query="France capital")  # the session goes on
    assert not after.is_error and "country/FRA#" in after.content
    assert session.metrics.tool_errors == 1


@pytest.mark.parametrize(("k", "message"), [
    (0, "k must be between 1 and 20, not 0"),
    (21, "k must be between 1 and 20, not 21"),
    ("many", "invalid arguments for search: k"),
])
async def test_bad_k_is_an_error_observation(call, env, k: object, message: str) -> None:
    session = await env.open(TASK)
    obs = await call(session, "search", query="France", k=k)
    assert obs.is_error and message in obs.content


async def test_answer_ends_the_episode(env) -> None:
    session = await env.open(TASK)
    result = await session.step([{"id": "a", "name": "answer", "arguments": '{"text": "Paris"}'}])
    assert result.done and result.stop_reason == "terminal_tool" and result.reward == 1.0


async def test_long_horizon_episodes(call, env) -> None:
    long_env = envhub.make("search", max_turns=64)
    session = await long_env.open(TASK)
    for turn in range(40):
        obs = await call(session, "search", query=f"capital {turn}")
        assert not obs.is_error
    assert not session.done
    obs = await call(session, "answer", text="Paris")
    closed = await session.close()
    assert closed.reward == 1.0 and closed.metrics.turns == 41


def test_bad_options_are_typed_errors() -> None:
    with pytest.raises(InvalidRequest, match="counterfactual must be true or false"):
        envhub.make("search", counterfactual="maybe")
    with pytest.raises(InvalidRequest, match="seed must be an integer"):
        envhub.make("search", seed="abc")
    with pytest.raises(InvalidRequest, match="bad options"):
        envhub.make("search", colour="blue")

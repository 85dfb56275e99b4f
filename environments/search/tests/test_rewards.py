"""Scoring: exact match over aliases with SQuAD normalisation, and the logged components."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

import envhub


@pytest.fixture(scope="module")
def env() -> envhub.LocalEnvironment:
    return envhub.make("search")


@pytest.fixture
def score(env, call) -> Callable[..., Awaitable[dict[str, float]]]:
    """``await score(task_id, answer, search=None)``: reward and components of an episode
    that optionally searches once, then answers."""

    async def run(task_id: str, answer: str, *, search: str | None = None) -> dict[str, float]:
        session = await env.open(task_id)
        if search is not None:
            await call(session, "search", query=search)
        await call(session, "answer", text=answer)
        result = await session.close()
        return {"reward": result.reward, **result.components}

    return run


@pytest.mark.parametrize(("task_id", "answer", "expected"), [
    ("search-single-capital-FRA", "Paris", 1.0),
    ("search-single-capital-FRA", "  the PARIS. ", 1.0),  # case, article, punctuation
    ("search-single-capital-FRA", "Lyon", 0.0),
    ("search-single-capital-FRA", "Paris, France", 0.0),  # exact match, not containment
    ("search-single-currency-FRA", "EUR", 1.0),  # currency code alias
    ("search-single-currency-FRA", "the euro", 1.0),
    ("search-single-calling_code-FRA", "+33", 1.0),
    ("search-single-calling_code-FRA", "33", 1.0),
    ("search-single-element_of_symbol-Fe", "iron", 1.0),
])
async def test_exact_match_over_aliases(score, task_id: str, answer: str, expected: float) -> None:
    assert (await score(task_id, answer))["reward"] == expected


async def test_alternative_names_are_aliases(score, env) -> None:
    task = next(t for t in env.tasks
                if t.metadata["relation"] == "larger_population" and len(t.answer) > 1)
    for alias in (task.answer[1], task.answer[-1].upper()):
        assert (await score(task.id, alias))["reward"] == 1.0


async def test_numeric_formats_are_aliases(score, env) -> None:
    task = env.tasks.get("search-single-population-FRA")
    plain = task.answer[1]
    assert plain.isdigit() and task.answer[0] == f"{int(plain):,}"
    for form in (plain, f"{int(plain):,}", f"{int(plain):,}".replace(",", " ")):
        assert (await score(task.id, form))["reward"] == 1.0
    assert (await score(task.id, str(int(plain) + 1)))["reward"] == 0.0


async def test_f1_and_substring_are_logged_not_scored(score, env) -> None:
    scores = await score("search-single-capital-FRA", "Paris, France")
    assert scores["reward"] == 0.0
    assert scores["f1"] == pytest.approx(2 / 3)
    assert scores["substring_match"] == 1.0


async def test_retrieved_gold_follows_what_the_agent_saw(score, call, env) -> None:
    task_id = "search-bridge-capital_of_country_of_city-" + next(
        t.id.rsplit("-", 1)[1] for t in env.tasks
        if t.metadata["relation"] == "capital_of_country_of_city"
    )
    task = env.tasks.get(task_id)
    answer = task.answer[0]
    blind = await score(task_id, answer)
    assert blind == {**blind, "reward": 1.0, "retrieved_gold": 0.0, "gold_recall": 0.0}
    first_hop = task.gold_actions[0].arguments["query"]
    half = await score(task_id, answer, search=first_hop)
    assert half["retrieved_gold"] == 1.0 and half["gold_recall"] == 0.5

    session = await env.open(task_id)
    for gold in task.metadata["gold_passages"]:  # opening the articles counts as seeing them
        await call(session, "open", doc_id=gold)
    await call(session, "answer", text="wrong")
    closed = await session.close()
    assert closed.reward == 0.0 and closed.components["gold_recall"] == 1.0


async def test_final_message_without_answer_tool_is_scored(env) -> None:
    session = await env.open("search-single-capital-FRA")
    result = await session.step([], content="Paris")
    assert result.done and result.stop_reason == "final_answer" and result.reward == 1.0

"""The counterfactual corpus: facts change, and articles and answers change together."""

from __future__ import annotations

import sqlite3

import pytest
from envhub_search.corpus import Corpus, CorpusOptions, load_corpus
from envhub_search.counterfactual import perturb
from envhub_search.knowledge import load_knowledge_base

import envhub


@pytest.fixture(scope="module")
def worlds() -> tuple[envhub.LocalEnvironment, envhub.LocalEnvironment]:
    return envhub.make("search"), envhub.make("search", counterfactual=True)


def corpus_of(env: envhub.LocalEnvironment) -> Corpus:
    return load_corpus(CorpusOptions(**env.options))


def passages_of(env: envhub.LocalEnvironment) -> dict[str, str]:
    """Every passage of the environment's index, by id, read straight from the sqlite file."""
    con = sqlite3.connect(f"file:{corpus_of(env).index.path}?mode=ro", uri=True)
    try:
        return dict(con.execute("SELECT pid, body FROM passages"))
    finally:
        con.close()


def test_answers_change(worlds) -> None:
    real, fake = worlds
    changed: dict[str, list[bool]] = {}
    for task in fake.tasks:
        if task.id in real.tasks and task.metadata["type"] == "single":
            same = real.tasks.get(task.id).answer[0] == task.answer[0]
            changed.setdefault(task.metadata["relation"], []).append(not same)
    share = {rel: sum(flags) / len(flags) for rel, flags in changed.items()}
    assert share["population"] == 1.0
    assert share["discovery_year"] == 1.0
    assert share["currency"] > 0.5 and share["calling_code"] > 0.9
    assert share["capital"] > 0.3  # countries with one city in the corpus keep their capital
    assert share["atomic_number"] == share["element_of_symbol"] == 0.0  # identities are kept


def test_counterfactual_answers_are_stated_in_the_counterfactual_corpus(worlds) -> None:
    real, fake = worlds
    passages = passages_of(fake)
    checked = 0
    for task in fake.tasks:
        if task.metadata["type"] != "single" or task.id not in real.tasks:
            continue
        (pid,) = task.metadata["gold_passages"]
        assert task.answer[0] in passages[pid], task.id
        real_answer = real.tasks.get(task.id).answer[0]
        if task.metadata["relation"] == "population":
            assert real_answer not in passages[pid]
        checked += 1
    assert checked > 1000


def test_moved_capitals_are_consistent_across_articles(worlds) -> None:
    _, fake = worlds
    index = corpus_of(fake).index
    capital = fake.tasks.get("search-single-capital-FRA").answer[0]
    assert capital != "Paris"
    france = index.document("country/FRA").text
    assert any(s in france for s in (f"capital of France is {capital}.",
                                     f"{capital} serves as the capital of France.",
                                     f"in the capital, {capital}."))
    new = next(h for h in index.search(f"{capital} France", 10) if h.title == capital)
    assert "capital" in index.document(new.doc_id).text
    old = next(h for h in index.search("Paris", 10) if h.title == "Paris")
    assert "capital" not in index.document(old.doc_id).text


def test_perturbation_is_seeded() -> None:
    kb = load_knowledge_base()
    first, again, other = perturb(kb, 0), perturb(kb, 0), perturb(kb, 1)
    assert first == again
    assert first != other
    assert kb.countries["FRA"].capital_name == "Paris"  # the input is not modified
    assert {c.name for c in first.countries.values()} == {c.name for c in kb.countries.values()}

"""Corpus building: determinism, chunking, gold passages, caching, and the index itself."""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from envhub_search.articles import PASSAGE_WORDS, Document, Sentence, chunk, render_documents
from envhub_search.corpus import CorpusOptions, _materialise, cache_root, load_corpus
from envhub_search.index import QueryTooLong, fts_query
from envhub_search.knowledge import load_knowledge_base

import envhub


@pytest.fixture(scope="module")
def kb():
    return load_knowledge_base()


def test_rendering_is_deterministic_and_seeded(kb) -> None:
    first, again, other = (render_documents(kb, s) for s in (0, 0, 1))
    assert [d.text for d in first] == [d.text for d in again]
    differing = sum(a.text != b.text for a, b in zip(first, other, strict=True))
    assert differing > len(first) // 2  # the prose varies with the seed ...
    def facts(docs: list[Document]) -> list[list[str]]:
        return [sorted(f for s in d.sentences for f in s.facts) for d in docs]

    assert facts(first) == facts(other)  # ... the facts do not


def test_chunks_are_about_a_hundred_words_with_stable_ids() -> None:
    doc = Document("t/1", "T", [Sentence(f"Sentence number {i} has some words.", (f"f{i}",))
                                for i in range(60)] + [Sentence("long " * 210)])
    passages = chunk(doc)
    assert [p.pid for p in passages] == [f"t/1#{i}" for i in range(len(passages))]
    # 6-word sentences fill passages up to 100 words; the 210-word sentence is cut into
    # windows of 100, 100 and 10 words, and the short tail joins the passage before it
    assert [len(p.text.split()) for p in passages] == [96, 96, 96, 72, 100, 110]
    assert PASSAGE_WORDS == 100
    assert set().union(*(p.facts for p in passages)) == {f"f{i}" for i in range(60)}
    assert " ".join(p.text for p in passages).split() == doc.text.split()


def test_every_gold_passage_states_its_single_hop_answer() -> None:
    env = envhub.make("search")
    con = sqlite3.connect(f"file:{load_corpus(CorpusOptions()).index.path}?mode=ro", uri=True)
    passages = dict(con.execute("SELECT pid, body FROM passages"))
    con.close()
    single = [t for t in env.tasks if t.metadata["type"] == "single"]
    for task in single:
        (pid,) = task.metadata["gold_passages"]
        assert task.answer[0] in passages[pid], task.id
    multi = [t for t in env.tasks if t.metadata["hops"] > 1]
    assert all(len(t.metadata["gold_passages"]) == t.metadata["hops"] for t in multi)
    assert all(p in passages for t in multi for p in t.metadata["gold_passages"])


def test_cache_location(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path))
    assert cache_root() == tmp_path / "search"
    monkeypatch.delenv("ENVHUB_CACHE")
    assert cache_root() == Path.home() / ".cache" / "envhub" / "search"


def test_cache_is_keyed_by_options_and_reused() -> None:
    options, root = CorpusOptions(), cache_root()
    first = _materialise(options, root)
    stamp = os.stat(first / "index.sqlite").st_mtime_ns
    assert _materialise(options, root) == first
    assert os.stat(first / "index.sqlite").st_mtime_ns == stamp  # not rebuilt
    assert first.name == options.cache_key()
    assert CorpusOptions(seed=1).cache_key() != options.cache_key()
    assert CorpusOptions(counterfactual=True).cache_key() != options.cache_key()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no scratch left behind


def test_corpus_is_shared_within_a_process() -> None:
    assert load_corpus(CorpusOptions()) is load_corpus(CorpusOptions())
    assert str(load_corpus(CorpusOptions()).directory).startswith(os.environ["ENVHUB_CACHE"])


@pytest.mark.parametrize(("query", "expected"), [
    ("capital of France?", '"capital" OR "france"'),
    ('say "hi" (now) OR: NEAR', '"say" OR "hi" OR "now" OR "near"'),
    ("the of", '"the" OR "of"'),  # only stop words: keep them
    ("Zürich", '"zürich"'),
    ("?!", None),
    ("", None),
])
def test_fts_query_quotes_words(query: str, expected: str | None) -> None:
    assert fts_query(query) == expected


def test_fts_query_limits() -> None:
    assert fts_query(" ".join(f"w{i}" for i in range(100))).count(" OR ") == 31
    with pytest.raises(QueryTooLong):
        fts_query("x" * 1001)


def test_index_is_safe_to_share_between_threads() -> None:
    index = load_corpus(CorpusOptions()).index
    tasks = list(envhub.make("search").tasks)[:200]
    queries = [t.gold_actions[0].arguments["query"] for t in tasks]
    expected = [[h.pid for h in index.search(q, 5)] for q in queries]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda q: [h.pid for h in index.search(q, 5)], queries * 4))
    assert got == expected * 4
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        index._connection().execute("DELETE FROM documents")

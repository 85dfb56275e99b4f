"""The optional bm25s retriever: same tools and ids, comparable recall, built once.

Needs the extra ``envhub-rl-search[bm25s]``, which ``.ci/run`` installs."""

from __future__ import annotations

import pytest
from envhub_search.corpus import CorpusOptions, load_corpus

import envhub
from envhub.errors import InvalidRequest
from envhub.testing import check_environment

TASK = "search-single-capital-FRA"


@pytest.fixture(scope="module")
def env() -> envhub.LocalEnvironment:
    return envhub.make("search", retriever="bm25s")


async def test_search_ranks_with_bm25s(call, env) -> None:
    session = await env.open(TASK)
    obs = await call(session, "search", query="France capital", k=3)
    assert not obs.is_error and obs.content.startswith("[1] id=country/FRA#")
    assert "title='France'" in obs.content and obs.content.count("\n[") <= 2
    absurd = await call(session, "search", query="qzxvbnmw plorkqua")
    assert absurd.content.startswith("No results for 'qzxvbnmw plorkqua'")
    empty = await call(session, "search", query="?!()")
    assert empty.content.startswith("No results: the query has no words")
    huge = await call(session, "search", query="capital " * 200)
    assert huge.is_error and "the limit is 1000" in huge.content


def test_gold_queries_find_gold_passages_as_often_as_with_fts5() -> None:
    corpus = load_corpus(CorpusOptions())
    tasks = [t for t in corpus.tasks.split("test") if t.metadata.get("gold_passages")]
    recall = {}
    for name in ("fts5", "bm25s"):
        retriever = corpus.retriever(name)
        found = 0
        for task in tasks:
            query = next(a.arguments["query"] for a in task.gold_actions if a.name == "search")
            pids = {hit.pid for hit in retriever.search(query, 5)}
            found += bool(pids & set(task.metadata["gold_passages"]))
        recall[name] = found / len(tasks)
    assert recall["bm25s"] >= 0.97 and recall["bm25s"] >= recall["fts5"] - 0.02, recall


def test_the_matrix_is_saved_once_and_loaded_after(monkeypatch: pytest.MonkeyPatch) -> None:
    from envhub_search.bm25s_index import Bm25sRetriever

    corpus = load_corpus(CorpusOptions())
    corpus.retriever("bm25s")
    assert list(corpus.directory.glob("bm25s-*/params.index.json"))

    def no_rebuild(self: Bm25sRetriever, target: object) -> None:
        raise AssertionError("rebuilt a saved matrix")

    monkeypatch.setattr(Bm25sRetriever, "_build", no_rebuild)
    again = Bm25sRetriever(corpus.index, corpus.directory)
    assert again.search("France capital", 1)[0].doc_id == "country/FRA"


def test_reference_scores_one_and_noop_zero_with_bm25s() -> None:
    env = envhub.make("search", retriever="bm25s")
    sample = [task.id for task in env.tasks.split("test")][:60]
    assert check_environment(env, task_ids=sample, concurrency=8).checked == len(sample)


def test_unknown_retriever_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="retriever must be one of fts5, bm25s"):
        envhub.make("search", retriever="faiss").new_session(TASK)

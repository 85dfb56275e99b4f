"""A corpus (FTS5 index, tasks) and its bm25s matrix that are not in the cache yet,
wanted at once by threads and processes, are each built once."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.testing import first_uses_at_once

_SCRIPT = """
from envhub_search import corpus
from envhub_search.bm25s_index import Bm25sRetriever
from envhub_search.corpus import CorpusOptions, load_corpus

_build_corpus, _build_matrix = corpus._build, Bm25sRetriever._build

def _count(kind):
    with open({builds!r}, "a") as fh:
        fh.write(kind + "\\n")

def _counted_corpus(options, target):  # the real builders, counted
    _count("corpus")
    _build_corpus(options, target)

def _counted_matrix(self, target):
    _count("bm25s")
    _build_matrix(self, target)

corpus._build, Bm25sRetriever._build = _counted_corpus, _counted_matrix

def first_use() -> None:
    loaded = load_corpus(CorpusOptions(seed=3), {cache!r})
    assert len(loaded.tasks) > 1000
    for name in ("fts5", "bm25s"):
        hits = loaded.retriever(name).search("France capital", 3)
        assert any(hit.doc_id == "country/FRA" for hit in hits), (name, hits)
"""


def test_cold_corpus_and_matrix_are_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("bm25s", reason="needs envhub-rl-search[bm25s] (CI installs it)")
    from envhub_search import corpus
    from envhub_search.bm25s_index import Bm25sRetriever

    script = _SCRIPT.format(builds=str(tmp_path / "builds"), cache=str(tmp_path / "cache"))
    monkeypatch.setattr(corpus, "_build", corpus._build)  # restored after the test
    monkeypatch.setattr(Bm25sRetriever, "_build", Bm25sRetriever._build)
    namespace: dict[str, object] = {}
    exec(script, namespace)
    first_uses_at_once(namespace["first_use"], script, threads=3, processes=3)  # type: ignore[arg-type]
    assert sorted((tmp_path / "builds").read_text().splitlines()) == ["bm25s", "corpus"]

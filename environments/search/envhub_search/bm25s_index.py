"""The optional ``bm25s`` retriever: the same passages, ranked by bm25s in memory.

FTS5 is the default (nothing to install, the index is one file). bm25s scores with numpy
over a sparse matrix held in memory, at about half FTS5's CPU per query on the shipped
corpus (``benchmarks/search_latency.py``), which matters when thousands of episodes search
at once. The matrix is built once per corpus from the FTS5 index's passages and saved
next to it (``bm25s-<version>/``); later processes memory-map it.

Differences from FTS5, by design: bm25s has one text field, so a passage is indexed as its
title followed by its body (FTS5 weighs titles 3x); words are stemmed with PyStemmer's
English (Porter 2) stemmer and English stop words are dropped. Hits carry the same ids,
titles and text, read back from the SQLite index by rowid.
"""

from __future__ import annotations

import importlib.metadata
import threading
from pathlib import Path
from typing import Any

from envhub.errors import InvalidRequest
from envhub.runtime.cache import build_once
from envhub_search.index import MAX_QUERY_CHARS, Hit, QueryTooLong, SearchIndex

__all__ = ["Bm25sRetriever"]

_BATCH = 50_000  # passages read from SQLite at a time while building


def _modules() -> tuple[Any, Any]:
    try:
        import bm25s
        import Stemmer
    except ImportError:
        raise InvalidRequest(
            "retriever=bm25s needs `pip install 'envhub-rl-search[bm25s]'` (bm25s, PyStemmer)"
        ) from None
    return bm25s, Stemmer


class Bm25sRetriever:
    """``search(query, k)`` like :class:`SearchIndex`, ranked by bm25s."""

    def __init__(self, index: SearchIndex, directory: Path) -> None:
        bm25s, stemmer_module = _modules()
        self._bm25s = bm25s
        self._index = index
        self._stemmer = stemmer_module.Stemmer("english")
        self._lock = threading.Lock()  # bm25s.tokenize and the stemmer are not thread-safe
        saved = build_once(directory / f"bm25s-{importlib.metadata.version('bm25s')}",
                           self._build)
        self._model = bm25s.BM25.load(str(saved), mmap=True, load_vocab=True,
                                      show_progress=False)

    def _build(self, target: Path) -> None:
        """Index every passage (rowid order, so a bm25s document i is SQLite row i + 1) and
        save the matrix at ``target`` (once per corpus: :func:`envhub.runtime.cache.build_once`)."""
        texts: list[str] = []
        for rows in self._index.passage_batches(_BATCH):
            texts.extend(f"{title}\n{body}" for _rowid, title, body in rows)
        tokens = self._bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer,
                                      show_progress=False)
        model = self._bm25s.BM25()
        model.index(tokens, show_progress=False)
        model.save(str(target), show_progress=False)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The ``k`` best passages by bm25s; [] if no query word is in the corpus."""
        if len(query) > MAX_QUERY_CHARS:
            raise QueryTooLong(
                f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}"
            )
        with self._lock:
            words = self._bm25s.tokenize(query, stopwords="en", stemmer=self._stemmer,
                                         return_ids=False, show_progress=False)[0]
        known = [w for w in words if w in self._model.vocab_dict]
        if not known:
            return []
        documents, scores = self._model.retrieve([known], k=min(k, self._model.scores["num_docs"]),
                                                 show_progress=False, n_threads=1)
        ranked = [(int(d), float(s)) for d, s in zip(documents[0], scores[0], strict=True)
                  if s > 0]
        rows = self._index.passages_by_rowid([d + 1 for d, _ in ranked])
        return [Hit(*rows[d + 1], score) for d, score in ranked]

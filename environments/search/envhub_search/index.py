"""The passage index: SQLite FTS5 with BM25 ranking, built once, read by many threads.

Model queries are free text, and FTS5's query language would raise syntax errors on
stray quotes, colons or parentheses; :func:`fts_query` therefore keeps only word tokens,
quotes each one and ORs them, so any string is a valid query. Stop words are dropped
when the query has other words: on large corpora they only cost time.

Sync tools run in worker threads and sqlite3 connections must not cross threads, so
:class:`SearchIndex` opens one read-only connection per thread.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from envhub_search.articles import Passage

__all__ = [
    "MAX_QUERY_CHARS",
    "DocumentRecord",
    "Hit",
    "QueryTooLong",
    "SearchIndex",
    "build_index",
    "fts_query",
]

MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32
TITLE_WEIGHT = 3.0  # bm25 weight of the title column relative to the body

_TOKEN = re.compile(r"\w+")
_STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how in is it its of on or "
    "that the their this to was were what when where which who whom whose why with".split()
)

_SCHEMA = """
CREATE TABLE documents(doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL,
                       passages INTEGER NOT NULL);
CREATE VIRTUAL TABLE passages USING fts5(
    pid UNINDEXED, doc_id UNINDEXED, title, body,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
"""


class QueryTooLong(ValueError):
    """The query is longer than :data:`MAX_QUERY_CHARS`."""


@dataclass(frozen=True)
class Hit:
    pid: str
    doc_id: str
    title: str
    text: str
    score: float


@dataclass(frozen=True)
class DocumentRecord:
    doc_id: str
    title: str
    text: str
    passage_ids: tuple[str, ...]


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression OR-ing the quoted word tokens of ``text`` (None: no words)."""
    if len(text) > MAX_QUERY_CHARS:
        raise QueryTooLong(
            f"the query is {len(text)} characters long; the limit is {MAX_QUERY_CHARS}"
        )
    tokens = list(dict.fromkeys(t.lower() for t in _TOKEN.findall(text)))
    content = [t for t in tokens if t not in _STOPWORDS] or tokens
    if not content:
        return None
    return " OR ".join(f'"{t}"' for t in content[:MAX_QUERY_TERMS])


def build_index(
    path: str | os.PathLike[str],
    documents: Iterable[tuple[str, str, str, int]],
    passages: Iterable[Passage],
    *,
    batch: int = 20_000,
) -> None:
    """Write a new index at ``path`` from ``(doc_id, title, text, n_passages)`` and passages."""
    con = sqlite3.connect(os.fspath(path))
    try:
        con.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _SCHEMA)
        con.executemany("INSERT INTO documents VALUES (?, ?, ?, ?)", documents)
        rows: list[tuple[str, str, str, str]] = []
        for p in passages:
            rows.append((p.pid, p.doc_id, p.title, p.text))
            if len(rows) >= batch:
                con.executemany("INSERT INTO passages VALUES (?, ?, ?, ?)", rows)
                rows.clear()
        con.executemany("INSERT INTO passages VALUES (?, ?, ?, ?)", rows)
        con.execute("INSERT INTO passages(passages) VALUES ('optimize')")
        con.commit()
    finally:
        con.close()


class SearchIndex:
    """Read-only access to an index file, safe to share between threads and sessions."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"no search index at {self.path}")
        self._local = threading.local()

    def _connection(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            con.execute("PRAGMA query_only = ON")
            self._local.con = con
        return con

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The ``k`` best passages by BM25 (title words weigh more); [] if nothing matches."""
        expression = fts_query(query)
        if expression is None:
            return []
        rows = self._connection().execute(
            "SELECT pid, doc_id, title, body, bm25(passages, 0, 0, ?, 1.0) AS score"
            " FROM passages WHERE passages MATCH ? ORDER BY score LIMIT ?",
            (TITLE_WEIGHT, expression, k),
        ).fetchall()
        return [Hit(pid, doc_id, title, body, -score) for pid, doc_id, title, body, score in rows]

    def passage_batches(self, size: int) -> Iterator[list[tuple[int, str, str]]]:
        """Every passage as ``(rowid, title, body)``, in rowid order, ``size`` at a time."""
        last = 0
        while True:
            rows = self._connection().execute(
                "SELECT rowid, title, body FROM passages WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (last, size),
            ).fetchall()
            if not rows:
                return
            yield rows
            last = rows[-1][0]

    def passages_by_rowid(self, rowids: list[int]) -> dict[int, tuple[str, str, str, str]]:
        """``rowid -> (pid, doc_id, title, body)`` for the given rows."""
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        rows = self._connection().execute(
            f"SELECT rowid, pid, doc_id, title, body FROM passages WHERE rowid IN ({marks})",
            rowids,
        ).fetchall()
        return {rowid: (pid, doc_id, title, body) for rowid, pid, doc_id, title, body in rows}

    def document(self, doc_id: str) -> DocumentRecord | None:
        row = self._connection().execute(
            "SELECT title, text, passages FROM documents WHERE doc_id = ?", (doc_id,)
        ).fetchone()
        if row is None:
            return None
        title, text, count = row
        return DocumentRecord(doc_id, title, text, tuple(f"{doc_id}#{i}" for i in range(count)))

    def counts(self) -> tuple[int, int]:
        """(documents, passages) in the index."""
        con = self._connection()
        docs = con.execute("SELECT count(*) FROM documents").fetchone()[0]
        passages = con.execute("SELECT coalesce(sum(passages), 0) FROM documents").fetchone()[0]
        return int(docs), int(passages)

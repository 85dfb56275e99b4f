"""Read-only SQLite connections with a time limit and a row cap (standard library only).

Three locks keep a query from changing anything: the file is opened with ``mode=ro``,
``PRAGMA query_only`` is on, and an authorizer denies every action but reading (so
``ATTACH``, ``PRAGMA`` and ``load_extension`` fail even if the sqlglot gate were
bypassed). The time limit is a progress handler, which interrupts sqlite inside the
worker thread: a runaway join stops at the deadline instead of pinning the thread.

The module imports nothing outside the standard library because its source is also the
query runner inside a sandbox (``python3 -c <this file> DB TIMEOUT MAX_ROWS`` with the
query on stdin, JSON on stdout; see :mod:`envhub_sql.executor`).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FORBIDDEN_FUNCTIONS",
    "QueryError",
    "QueryResult",
    "QueryTimeout",
    "decode_result",
    "open_readonly",
    "run_query",
]

#: SQLite functions that touch the file system or load code
FORBIDDEN_FUNCTIONS = frozenset(
    {
        "load_extension",
        "readfile",
        "writefile",
        "edit",
        "fts3_tokenizer",
        "zipfile",
        "sqlar_compress",
        "sqlar_uncompress",
        "fsdir",
        "sqlite_dbpage",
    }
)

_PROGRESS_STEPS = 2_000  # sqlite VM instructions between deadline checks (~tens of µs)
#: largest string/blob a query may build (sqlite's default is 1 GB: zeroblob(1e9) would
#: allocate it), and longest accepted SQL text
MAX_VALUE_BYTES = 10_000_000
MAX_SQL_BYTES = 100_000

_DENIED_HINT = " (queries may only read tables; PRAGMA, ATTACH and extensions are disabled)"
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})


class QueryError(Exception):
    """SQLite rejected or failed the query; the message is sqlite's, for the model."""


class QueryTimeout(QueryError):
    """The query ran past its time limit and was interrupted."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows existed than ``max_rows``


def _authorize(
    action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None
) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() not in FORBIDDEN_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def open_readonly(path: str | Path) -> sqlite3.Connection:
    """A connection that can only read ``path`` (usable from any thread, one at a time)."""
    resolved = Path(path).resolve()
    if not resolved.is_file():
        raise FileNotFoundError(f"database file not found: {resolved}")
    conn = sqlite3.connect(
        f"{resolved.as_uri()}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
    )
    conn.execute("PRAGMA query_only = ON")
    if hasattr(conn, "setlimit"):  # Python >= 3.11
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES)
    conn.set_authorizer(_authorize)
    return conn


def run_query(
    conn: sqlite3.Connection,
    query: str,
    params: tuple[Any, ...] = (),
    *,
    timeout_s: float,
    max_rows: int | None = None,
) -> QueryResult:
    """Run ``query`` and fetch at most ``max_rows`` rows (all when ``None``) before the deadline."""
    deadline = time.monotonic() + timeout_s
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
    try:
        cursor = conn.execute(query, params)
        columns = [d[0] for d in cursor.description or []]
        if max_rows is None:
            rows = cursor.fetchall()
            truncated = False
        else:
            rows = cursor.fetchmany(max_rows + 1)
            truncated = len(rows) > max_rows
            rows = rows[:max_rows]
        cursor.close()
    except sqlite3.Error as exc:
        if time.monotonic() > deadline:
            raise QueryTimeout(
                f"the query ran longer than the {timeout_s:g} s limit and was stopped"
            ) from None
        hint = _DENIED_HINT if "not authorized" in str(exc) else ""
        raise QueryError(f"{type(exc).__name__}: {exc}{hint}") from None
    finally:
        conn.set_progress_handler(None, 0)
    return QueryResult(columns=columns, rows=rows, truncated=truncated)


# -- the sandbox runner protocol ------------------------------------------------------------


def _encode_value(value: Any) -> Any:
    return {"$bytes": value.hex()} if isinstance(value, bytes) else value


def _decode_value(value: Any) -> Any:
    return bytes.fromhex(value["$bytes"]) if isinstance(value, dict) else value


def decode_result(payload: str) -> QueryResult:
    """The runner's JSON line back into a result, or the error it reported."""
    data = json.loads(payload)
    if "error" in data:
        raise (QueryTimeout if data.get("timeout") else QueryError)(data["error"])
    rows = [tuple(_decode_value(v) for v in row) for row in data["rows"]]
    return QueryResult(columns=data["columns"], rows=rows, truncated=data["truncated"])


def main(argv: list[str]) -> None:
    """Runner entry: ``DB TIMEOUT_S MAX_ROWS`` (MAX_ROWS 0: all rows), the query on stdin."""
    path, timeout_s, max_rows = argv[0], float(argv[1]), int(argv[2])
    try:
        conn = open_readonly(path)
        result = run_query(conn, sys.stdin.read(), timeout_s=timeout_s, max_rows=max_rows or None)
    except QueryError as exc:
        json.dump({"error": str(exc), "timeout": isinstance(exc, QueryTimeout)}, sys.stdout)
        return
    rows = [[_encode_value(v) for v in row] for row in result.rows]
    json.dump({"columns": result.columns, "rows": rows, "truncated": result.truncated}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Read-only SQLite connections with a time limit and a row cap (standard library only).

Three locks keep a query from changing anything: the file is opened with ``mode=ro``,
``PRAGMA query_only`` is on, and an authorizer denies every action but reading (so
``ATTACH``, ``PRAGMA`` and ``load_extension`` fail even if the sqlglot gate were
bypassed). The time limit is a progress handler, which interrupts sqlite inside the
calling thread: a runaway join stops at the deadline instead of pinning the thread.

A progress handler runs only between steps of sqlite's virtual machine, never inside one
function call, so one call can run far past the limit (``printf('%.*c', 2e9, 'x')``;
``instr``, ``trim`` or ``LIKE`` over megabytes). Model-written queries therefore run in a
process that is ended when they outlive :data:`GRACE_S` past their limit: this module's
source is also that query runner, in two forms (see :mod:`envhub_sql.executor`), which is
why it imports nothing outside the standard library. One query inside a sandbox
(``python3 -c <this file> DB TIMEOUT MAX_ROWS``, the query on stdin, JSON on stdout; a
watchdog thread answers "timeout" and exits at the deadline), and a long-lived worker
process of the server (``--serve MEMORY_BYTES``: one JSON request per line in, one JSON
reply per line out; its parent kills it at the deadline).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ACK",
    "FORBIDDEN_FUNCTIONS",
    "GRACE_S",
    "MAX_RESULT_BYTES",
    "MAX_SQL_BYTES",
    "MAX_VALUE_BYTES",
    "READY",
    "SETUP_FAILED",
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
#: largest encoded result a runner sends back (a submission may have 100,000 rows)
MAX_RESULT_BYTES = 64_000_000
#: how long past its limit a query may run before its runner process is ended (the
#: progress handler stops ordinary runaway queries at the limit itself)
GRACE_S = 0.5
#: the line a worker writes once it is ready for requests, and what it writes as soon as
#: it has read one (before running it)
READY = "ready"
ACK = "+"
#: exit status of a runner that could not open its database: the runner's failure, not
#: the query's (a crash while a query runs is the query's doing)
SETUP_FAILED = 3

_DENIED_HINT = " (queries may only read tables; PRAGMA, ATTACH and extensions are disabled)"
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})


class QueryError(Exception):
    """SQLite rejected or failed the query; the message is sqlite's, for the model."""


class QueryTimeout(QueryError):
    """The query ran past its time limit and was interrupted."""

    @classmethod
    def after(cls, timeout_s: float) -> QueryTimeout:
        return cls(f"the query ran longer than the {timeout_s:g} s limit and was stopped")


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
            raise QueryTimeout.after(timeout_s) from None
        hint = _DENIED_HINT if "not authorized" in str(exc) else ""
        # sqlite's message alone: the session names this QueryError ("Error: QueryError: no
        # such table: x"), and a second class name (OperationalError) tells the model nothing
        raise QueryError(f"{exc}{hint}") from None
    finally:
        conn.set_progress_handler(None, 0)
    return QueryResult(columns=columns, rows=rows, truncated=truncated)


# -- the runner protocol (a sandbox process, or a worker process of the server) ---------


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


def _error_reply(message: str, timeout: bool = False) -> str:
    return json.dumps({"error": message, "timeout": timeout})


def _reply(conn: sqlite3.Connection, query: str, timeout_s: float, max_rows: int) -> str:
    """One query as the JSON line a runner sends back (rows, or the error to show)."""
    try:
        result = run_query(conn, query, timeout_s=timeout_s, max_rows=max_rows or None)
        rows = [[_encode_value(v) for v in row] for row in result.rows]
        payload = json.dumps(
            {"columns": result.columns, "rows": rows, "truncated": result.truncated}
        )
    except QueryError as exc:
        return _error_reply(str(exc), isinstance(exc, QueryTimeout))
    except MemoryError:
        raise
    except Exception as exc:  # the query's doing (text sqlite cannot pass to Python, ...)
        return _error_reply(f"{type(exc).__name__}: {exc}")
    if len(payload) > MAX_RESULT_BYTES:
        return _error_reply(
            f"the result is larger than {MAX_RESULT_BYTES // 1_000_000} MB; "
            "select fewer rows or smaller values"
        )
    return payload


def _open_or_exit(path: str) -> sqlite3.Connection:
    try:
        return open_readonly(path)
    except (OSError, sqlite3.Error) as exc:
        print(f"cannot open the database {path}: {exc}", file=sys.stderr)
        raise SystemExit(SETUP_FAILED) from None


def _serve(memory_bytes: int) -> None:
    """Worker loop: ``{"db", "query", "timeout_s", "max_rows"}`` lines in, replies out.

    Connections stay open per database. The address space is capped at ``memory_bytes``,
    so a query that needs more fails with an error instead of taking the host's memory.
    """
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    sys.stdout.write(READY + "\n")
    sys.stdout.flush()
    connections: dict[str, sqlite3.Connection] = {}
    for line in sys.stdin:
        sys.stdout.write(ACK)
        sys.stdout.flush()
        request = json.loads(line)
        conn = connections.get(request["db"])
        if conn is None:
            conn = connections[request["db"]] = _open_or_exit(request["db"])
        try:
            reply = _reply(conn, request["query"], request["timeout_s"], request["max_rows"])
        except MemoryError:  # the query's objects are gone by now: the worker goes on
            reply = _error_reply(f"the query ran out of memory (limit {memory_bytes >> 20} MiB)")
        sys.stdout.write(reply + "\n")
        sys.stdout.flush()


def _run_once(path: str, timeout_s: float, max_rows: int) -> None:
    """One query from stdin, answered before ``timeout_s + GRACE_S`` whatever sqlite does:
    sqlite releases the GIL while it runs, so a watchdog thread can answer and exit."""
    answered = threading.Lock()

    def give_up() -> None:
        if answered.acquire(blocking=False):
            sys.stdout.write(_error_reply(str(QueryTimeout.after(timeout_s)), timeout=True))
            sys.stdout.flush()
            os._exit(0)

    watchdog = threading.Timer(timeout_s + GRACE_S, give_up)
    watchdog.daemon = True
    watchdog.start()
    conn = _open_or_exit(path)
    reply = _reply(conn, sys.stdin.read(), timeout_s, max_rows)
    if answered.acquire(blocking=False):
        sys.stdout.write(reply)


def main(argv: list[str]) -> None:
    """Runner entry: ``DB TIMEOUT_S MAX_ROWS`` (MAX_ROWS 0: all rows) with the query on
    stdin, or ``--serve MEMORY_BYTES`` for a worker (see :func:`_serve`)."""
    if argv[0] == "--serve":
        _serve(int(argv[1]))
    else:
        _run_once(argv[0], float(argv[1]), int(argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])

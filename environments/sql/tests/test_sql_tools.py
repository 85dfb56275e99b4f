"""The tools through real sessions: exploration, the read-only gate, limits and truncation."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Awaitable, Callable

import pytest
from envhub_sql import open_readonly, run_query
from envhub_sql.catalog import resolve_database
from envhub_sql.connection import QueryError

import envhub
from envhub import StepResult

CallTool = Callable[..., Awaitable[StepResult]]  # the `call` fixture (conftest.py)


async def test_list_and_describe_tables(sql_env: envhub.LocalEnvironment, call: CallTool) -> None:
    session = await sql_env.open("chinook-0000")
    listing = (await call(session, "list_tables")).observations[0]
    assert not listing.is_error
    assert "track (3503 rows): A song or video for sale" in listing.content
    described = (await call(session, "describe_table", name="album")).observations[0].content
    assert "REFERENCES artist (artist_id)" in described
    assert "artist_id: The artist who released the album" in described
    assert "For Those About To Rock We Salute You" in described and "(3 rows)" in described
    missing = (await call(session, "describe_table", name="albums")).observations[0]
    assert missing.is_error and "no table named 'albums'" in missing.content
    await session.close()


async def test_run_sql_returns_rows(sql_env: envhub.LocalEnvironment, call: CallTool) -> None:
    session = await sql_env.open("elements-0000")
    result = await call(
        session, "run_sql", query="SELECT symbol, name FROM elements WHERE atomic_number <= 2"
    )
    assert result.observations[0].content == "symbol | name\nH | Hydrogen\nHe | Helium\n(2 rows)"
    error = (await call(session, "run_sql", query="SELECT nope FROM elements")).observations[0]
    # one class name before sqlite's message, as for every tool's exception
    assert error.is_error and error.content == "Error: QueryError: no such column: nope"
    await session.close()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "DROP TABLE track",
            "only read-only SELECT (or WITH ... SELECT) queries are allowed, not DROP",
        ),
        ("ATTACH DATABASE '/tmp/evil.db' AS evil", "not ATTACH"),
        ("PRAGMA writable_schema = 1", "not PRAGMA"),
        ("SELECT 1; DROP TABLE track", "only a single statement is allowed, found 2"),
        ("SELECT load_extension('/tmp/evil.so')", "function load_extension() is not allowed"),
        ("WITH t AS (SELECT 1) DELETE FROM track", "not DELETE"),
    ],
)
async def test_unsafe_queries_are_rejected_with_a_clear_message(
    sql_env: envhub.LocalEnvironment, call: CallTool, query: str, message: str
) -> None:
    task_id = "chinook-0000"
    path = resolve_database("chinook").path
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    session = await sql_env.open(task_id)
    observation = (await call(session, "run_sql", query=query)).observations[0]
    assert observation.is_error
    assert "query rejected" in observation.content and message in observation.content
    still = (await call(session, "run_sql", query="SELECT COUNT(*) FROM track")).observations[0]
    assert still.content == "COUNT(*)\n3503\n(1 row)"
    await session.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE track",
        "ATTACH DATABASE ':memory:' AS other",
        "PRAGMA writable_schema = 1",
        "SELECT load_extension('x')",
        "INSERT INTO genre VALUES (99, 'x')",
        "CREATE TEMP TABLE t (x)",
    ],
)
def test_connection_denies_writes_even_without_the_gate(statement: str) -> None:
    """Defence in depth: the authorizer and mode=ro stop what a gate bypass would let through."""
    conn = open_readonly(resolve_database("chinook").path)
    with pytest.raises(QueryError, match="not authorized"):
        run_query(conn, statement, timeout_s=5.0)
    conn.close()


async def test_runaway_join_hits_the_time_limit_and_the_session_stays_usable(
    call: CallTool,
) -> None:
    env = envhub.make("sql", query_timeout_s=0.5)
    session = await env.open("chinook-0000")
    runaway = "SELECT COUNT(*) FROM track AS a, track AS b, track AS c"
    observation = (await call(session, "run_sql", query=runaway)).observations[0]
    assert observation.is_error
    assert "ran longer than the 0.5 s limit and was stopped" in observation.content
    after = (await call(session, "run_sql", query="SELECT COUNT(*) FROM genre")).observations[0]
    assert after.content == "COUNT(*)\n25\n(1 row)"
    assert session.metrics.errors_by_kind == {"exception": 1}
    await session.close()


def test_huge_values_are_refused_instead_of_allocated() -> None:
    conn = open_readonly(resolve_database("chinook").path)
    with pytest.raises(QueryError, match="too big"):
        run_query(conn, "SELECT length(zeroblob(500000000))", timeout_s=5.0)
    conn.close()


async def test_a_ten_thousand_row_result_is_truncated(
    sql_env: envhub.LocalEnvironment, call: CallTool
) -> None:
    session = await sql_env.open("chinook-0000")
    query = "SELECT a.track_id, b.genre_id FROM track AS a, genre AS b LIMIT 10000"
    content = (await call(session, "run_sql", query=query)).observations[0].content
    lines = content.splitlines()
    assert lines[0] == "track_id | genre_id"
    assert len(lines) == 1 + 50 + 1
    assert lines[-1].startswith("(truncated: showing the first 50 rows; the result has more.")
    await session.close()


def test_shipped_databases_have_keys_and_open_read_only(tmp_path) -> None:
    from envhub_sql.builder import build_database

    path = build_database("chinook", root=tmp_path)
    conn = sqlite3.connect(path)
    keys = conn.execute("PRAGMA foreign_key_list(track)").fetchall()
    assert {(k[2], k[3]) for k in keys} == {
        ("album", "album_id"),
        ("media_type", "media_type_id"),
        ("genre", "genre_id"),
    }
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()
    assert build_database("chinook", root=tmp_path) == path  # cached: no rebuild
    readonly = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        readonly.execute("DELETE FROM genre")
    readonly.close()

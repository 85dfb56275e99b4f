"""Plain-text renderings of results and schemas, as the model reads them."""

from __future__ import annotations

import sqlite3
from typing import Any

from envhub_sql.connection import QueryResult, run_query
from envhub_sql.schema import TableNote

__all__ = ["describe", "format_result", "format_value", "list_tables_text"]

_MAX_CELL = 200


def format_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    text = str(value)
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 3] + "..."


def format_result(result: QueryResult, max_rows: int) -> str:
    """A header line, one ``|``-separated line per row, and a row count or truncation note."""
    lines = [" | ".join(result.columns)]
    lines += [" | ".join(format_value(v) for v in row) for row in result.rows]
    if result.truncated:
        lines.append(
            f"(truncated: showing the first {max_rows} rows; the result has more. "
            "Aggregate or add LIMIT to see less.)"
        )
    else:
        lines.append(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")
    return "\n".join(lines)


def table_names(conn: sqlite3.Connection) -> list[str]:
    rows = run_query(
        conn,
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name",
        timeout_s=5.0,
    ).rows
    return [r[0] for r in rows]


def list_tables_text(conn: sqlite3.Connection, notes: dict[str, TableNote] | None) -> str:
    lines = []
    for name in table_names(conn):
        count = run_query(conn, f'SELECT COUNT(*) FROM "{name}"', timeout_s=5.0).rows[0][0]
        note = notes[name].note if notes and name in notes else ""
        lines.append(f"{name} ({count} rows){': ' + note if note else ''}")
    return "\n".join(lines)


def describe(conn: sqlite3.Connection, table: str, note: TableNote | None, timeout_s: float) -> str:
    """The table's DDL, our column notes, and three sample rows."""
    ddl = run_query(
        conn,
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
        (table,),
        timeout_s=timeout_s,
    ).rows[0][0]
    parts = [ddl.strip()]
    if note is not None:
        parts.append(f"-- {note.note}" if note.note else "")
        parts.append("Column notes:")
        parts += [f"  {col}: {n.note}" for col, n in note.columns.items() if n.note]
    sample = run_query(conn, f'SELECT * FROM "{table}" LIMIT 3', timeout_s=timeout_s, max_rows=3)
    parts.append("Sample rows:")
    parts.append(format_result(sample, 3))
    return "\n".join(p for p in parts if p)

"""Column notes from a BIRD database's ``database_description/<table>.csv`` files.

BIRD ships, next to each ``<db_id>.sqlite``, one CSV per table with the columns
``original_column_name, column_name, column_description, data_format,
value_description``. BIRD's own evaluation gives these to the model, and many of its
questions cannot be answered without them (coded values, units), so ``describe_table``
shows them as it shows the notes we wrote for the shipped databases. The files come in
UTF-8 (some with a BOM) or Windows-1252, and their names do not always match the table
names' case.
"""

from __future__ import annotations

import csv
import io
import re
import sqlite3
from pathlib import Path

from envhub_sql.schema import ColumnNote, DatabaseNotes, TableNote

__all__ = ["bird_notes"]

_SPACE = re.compile(r"\s+")


def _text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace")


def _clean(value: str | None) -> str:
    return _SPACE.sub(" ", value or "").strip()


def _column_note(row: dict[str, str]) -> tuple[str, ColumnNote] | None:
    column = _clean(row.get("original_column_name"))
    if not column:
        return None
    name, description = _clean(row.get("column_name")), _clean(row.get("column_description"))
    parts = [description or name]
    if name and description and name.lower() not in (column.lower(), description.lower()):
        parts.insert(0, f"{name}:")
    if fmt := _clean(row.get("data_format")):
        parts.append(f"({fmt})")
    if values := _clean(row.get("value_description")):
        parts.append(f"Values: {values}")
    note = " ".join(p for p in parts if p)
    return column, ColumnNote(note=note)


def bird_notes(folder: Path, database: Path) -> DatabaseNotes | None:
    """The notes in ``folder/database_description`` for the tables of ``database``, or
    ``None`` when there are none (Spider layout)."""
    described = folder / "database_description"
    if not described.is_dir():
        return None
    con = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    finally:
        con.close()
    by_lower = {name.lower(): name for name in names}
    tables: dict[str, TableNote] = {}
    for path in sorted(described.glob("*.csv")):
        table = by_lower.get(path.stem.lower())
        if table is None:
            continue  # a description of a table this database does not have
        rows = csv.DictReader(io.StringIO(_text(path)))
        rows.fieldnames = [_clean(f).lower() for f in rows.fieldnames or []]
        notes = dict(filter(None, (_column_note(row) for row in rows)))
        tables[table] = TableNote(noun=table, plural=table, columns=notes)
    return DatabaseNotes(tables=tables) if tables else None

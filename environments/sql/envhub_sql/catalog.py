"""Resolve a task's ``db_id`` to a database file and its column notes.

Shipped databases are built into the cache on first use, with the notes we wrote; user
databases come from a Spider/BIRD ``db_root`` (``<db_root>/<db_id>/<db_id>.sqlite``) and
are used in place, read-only, with BIRD's ``database_description`` CSVs as notes when
they are there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from envhub_sql.bird_notes import bird_notes
from envhub_sql.builder import DATABASES, build_database
from envhub_sql.schema import DatabaseNotes, load_notes

__all__ = ["Database", "resolve_database"]


@dataclass(frozen=True)
class Database:
    db_id: str
    path: Path
    notes: DatabaseNotes | None = None


def _user_database(db_id: str, db_root: Path) -> Path:
    folder = db_root / db_id
    for candidate in (folder / f"{db_id}.sqlite", folder / f"{db_id}.db"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no database {db_id!r} under {db_root} (expected {folder / db_id}.sqlite)"
    )


@lru_cache(maxsize=1024)
def resolve_database(db_id: str, db_root: str | None = None) -> Database:
    """The database of ``db_id``: user data when ``db_root`` is given, else a shipped one."""
    if db_root is not None:
        path = _user_database(db_id, Path(db_root))
        return Database(db_id, path, bird_notes(path.parent, path))
    if db_id not in DATABASES:
        raise KeyError(f"unknown database {db_id!r}; shipped: {', '.join(sorted(DATABASES))}")
    path = build_database(db_id)  # once, however many sessions and processes start at once
    return Database(db_id, path, load_notes(db_id))

"""A shipped database that is not in the cache yet, wanted at once by threads and
processes (episodes starting together on a fresh machine), is built once."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.testing import first_uses_at_once

_SCRIPT = """
from envhub_sql import builder, build_database, open_readonly

_load = builder.DATABASES["elements"]

def _counted(conn):  # the real loader, counted
    with open({builds!r}, "a") as fh:
        fh.write("build\\n")
    _load(conn)

builder.DATABASES["elements"] = _counted

def first_use() -> None:
    conn = open_readonly(build_database("elements"))
    try:
        (count,) = conn.execute("SELECT count(*) FROM elements").fetchone()
    finally:
        conn.close()
    assert count == 118, count
"""


def test_cold_database_is_built_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path / "cache"))  # for threads and processes
    script = _SCRIPT.format(builds=str(tmp_path / "builds"))
    namespace: dict[str, object] = {}
    from envhub_sql import builder

    monkeypatch.setitem(builder.DATABASES, "elements", builder.DATABASES["elements"])
    exec(script, namespace)  # counts this process's builds too (undone by monkeypatch)
    first_uses_at_once(namespace["first_use"], script, threads=4, processes=3)  # type: ignore[arg-type]
    assert (tmp_path / "builds").read_text().splitlines() == ["build"]
    name = builder.database_path("elements").name
    assert sorted(p.name for p in (tmp_path / "cache" / "sql").iterdir()) == [
        name,
        f"{name}.lock",
        f"{name}.stamp",
    ]

"""CHANGELOG.md lists every moved import path as ``envhub._moved.MOVED`` has it,
so the aliases users are told about and the aliases that exist cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

from envhub._moved import MOVED

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
_ROW = re.compile(r"^\| `([\w.]+)` \| `([\w.]+)` \|$", re.MULTILINE)


def changelog_moves(changelog: str) -> dict[str, str]:
    """Old path -> new path for each ``| `old` | `new` |`` row of a table whose header is
    ``| old import path | new import path |``: only that table, never another one."""
    moves: dict[str, str] = {}
    for table in changelog.split("| old import path | new import path |")[1:]:
        rows = table.partition("\n\n")[0]
        moves.update(_ROW.findall(rows))
    return moves


def test_every_moved_path_is_in_the_changelog() -> None:
    listed = changelog_moves(CHANGELOG.read_text("utf-8"))
    wrong = {old: (new, listed.get(old)) for old, new in MOVED.items() if listed.get(old) != new}
    assert not wrong, f"CHANGELOG.md rows missing or stale (MOVED target, changelog's): {wrong}"


def test_the_changelog_reader_sees_only_the_moves_table() -> None:
    changelog = (
        "# Changelog\n| `envhub.a` | `envhub.b` |\n"
        "## 0.2\n| old import path | new import path |\n|---|---|\n| `envhub.c` | `envhub.d.e` |\n"
        "\n| `envhub.f` | `envhub.g` |\n"
    )
    assert changelog_moves(changelog) == {"envhub.c": "envhub.d.e"}

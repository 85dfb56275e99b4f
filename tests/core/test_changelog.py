"""The README's changelog lists every moved import path as ``envhub._moved.MOVED`` has it,
so the aliases users are told about and the aliases that exist cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

from envhub._moved import MOVED

README = Path(__file__).resolve().parents[2] / "README.md"
_ROW = re.compile(r"^\| `([\w.]+)` \| `([\w.]+)` \|$", re.MULTILINE)


def changelog_moves(readme: str) -> dict[str, str]:
    """Old path -> new path for each ``| `old` | `new` |`` row under ``## Changelog``."""
    section = readme.partition("\n## Changelog\n")[2].partition("\n## ")[0]
    return dict(_ROW.findall(section))


def test_every_moved_path_is_in_the_changelog() -> None:
    listed = changelog_moves(README.read_text("utf-8"))
    wrong = {old: (new, listed.get(old)) for old, new in MOVED.items() if listed.get(old) != new}
    assert not wrong, f"README changelog rows missing or stale (MOVED target, README's): {wrong}"


def test_the_changelog_reader_sees_only_its_section() -> None:
    readme = (
        "# envhub\n| `envhub.a` | `envhub.b` |\n"
        "## Changelog\n### 0.2\n| old | new |\n|---|---|\n| `envhub.c` | `envhub.d.e` |\n"
        "## Later\n| `envhub.f` | `envhub.g` |\n"
    )
    assert changelog_moves(readme) == {"envhub.c": "envhub.d.e"}

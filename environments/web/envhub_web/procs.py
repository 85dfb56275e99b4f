"""Chromium processes of this process tree, read from /proc (leak checks, memory figures)."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

__all__ = ["chromium_pids", "pss_mib"]


def _process_table() -> tuple[dict[int, int], dict[int, str]]:
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process exited while we looked
            continue
        pid = int(entry.name)
        names[pid] = stat[stat.index("(") + 1 : stat.rindex(")")]
        parents[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return parents, names


def _descends(parents: dict[int, int], pid: int, roots: set[int]) -> bool:
    for _ in range(64):
        pid = parents.get(pid, 0)
        if pid in roots:
            return True
        if pid <= 1:
            return False
    return False


def chromium_pids(root: int | None = None, *, outside: Collection[int] = ()) -> set[int]:
    """PIDs of Chromium processes descending from ``root`` (default: this process), except
    those descending from a process in ``outside``. Chromium starts helper processes
    (renderers, utilities) whenever it likes, so the processes one browser launch added
    are the new ones outside the browsers that were already running."""
    roots = {os.getpid() if root is None else root}
    excluded = set(outside)
    parents, names = _process_table()
    return {
        pid
        for pid, name in names.items()
        if "chrom" in name
        and _descends(parents, pid, roots)
        and not (excluded and _descends(parents, pid, excluded))
    }


def pss_mib(pids: set[int]) -> float:
    """Total proportional set size of ``pids`` in MiB (shared pages split fairly)."""
    total_kb = 0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total_kb += next(
            (int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0
        )
    return total_kb / 1024

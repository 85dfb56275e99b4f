"""Chromium processes of this process tree, read from /proc (leak checks, memory figures)."""

from __future__ import annotations

import os
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


def chromium_pids(root: int | None = None) -> set[int]:
    """PIDs of Chromium processes descending from ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    parents, names = _process_table()

    def descends(pid: int) -> bool:
        for _ in range(64):
            pid = parents.get(pid, 0)
            if pid == root:
                return True
            if pid <= 1:
                return False
        return False

    return {pid for pid, name in names.items() if "chrom" in name and descends(pid)}


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

"""Processes the bridge starts for these tests, found among the test process's children."""

from __future__ import annotations

import psutil  # type: ignore[import-untyped]


def live_children(*words: bytes | str) -> list[int]:
    """The pids of this test process's live child processes whose command line holds
    every one of ``words`` as an argument's part (servers the bridge started, the
    ``docker run`` that watches a container)."""
    wanted = [w.decode() if isinstance(w, bytes) else w for w in words]
    found = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if all(any(w in arg for arg in cmdline) for w in wanted):
            found.append(child.pid)
    return found

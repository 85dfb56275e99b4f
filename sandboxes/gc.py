"""Reaping leftover sandbox containers (``envhub sandbox gc``).

A crashed or SIGKILLed envhub process cannot close its containers, so every container
is labelled with its owner (host, pid, process start time) and an expiry time. gc
removes those whose owner process on this host is gone, those past their expiry, and,
with ``all_=True``, every envhub container. bwrap sandboxes need no gc: their processes
die with the parent (``--die-with-parent``) and only a temp directory can remain.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from pydantic import BaseModel

from envhub.sandboxes.docker import LABEL, _process_start_time, get_client

__all__ = ["GcReport", "gc_containers", "is_orphan"]


class GcReport(BaseModel):
    removed: list[str] = []
    kept: int = 0
    errors: list[str] = []


def is_orphan(labels: dict[str, str], *, now: float | None = None) -> bool:
    """True when the labelled owner is dead (same host) or the container expired."""
    now = time.time() if now is None else now
    expires = labels.get("envhub.expires")
    if expires and float(expires) < now:
        return True
    if labels.get("envhub.owner.host") != socket.gethostname():
        return False  # another machine's container: only expiry or --all reaps it
    pid = int(labels.get("envhub.owner.pid", "0") or 0)
    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
        return True
    return _process_start_time(pid) != labels.get("envhub.owner.start")


def gc_containers(*, all_: bool = False, pool: str | None = None) -> GcReport:
    """Remove orphaned envhub containers (blocking; run in a thread from async code)."""
    client: Any = get_client()
    filters = {"label": [LABEL]}
    if pool:
        filters["label"].append(f"envhub.pool={pool}")
    report = GcReport()
    for c in client.api.containers(all=True, filters=filters):
        labels = c.get("Labels") or {}
        if not (all_ or is_orphan(labels)):
            report.kept += 1
            continue
        try:
            client.api.remove_container(c["Id"], force=True, v=True)
            report.removed.append(c["Id"][:12])
        except Exception as exc:  # keep going; report every failure
            report.errors.append(f"{c['Id'][:12]}: {exc}")
    return report

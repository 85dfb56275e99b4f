"""Reaping leftover sandbox containers (``envhub sandbox gc``).

A crashed or SIGKILLed envhub process cannot close its containers, so every container
is labelled with its owner (host, pid, process start time) and an expiry time. gc
removes those whose owner process on this host is gone, those past their expiry, and,
with ``all_=True``, every envhub container. bwrap sandboxes' processes die with their
parent (``--die-with-parent``); what can remain is their directory (a tmpfs when envhub
ran as root), named after the owner's pid, which :func:`gc_bwrap_dirs` removes;
:func:`gc_local_dirs` does the same for ``local`` sandboxes' temp directories.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from envhub.sandboxes._tmpfs import DIR_PREFIX, SOURCE, unmount
from envhub.sandboxes.docker import LABEL, _process_start_time, get_client
from envhub.sandboxes.local import DIR_PREFIX as LOCAL_DIR_PREFIX

__all__ = ["GcReport", "gc_bwrap_dirs", "gc_containers", "gc_local_dirs", "is_orphan"]


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


def gc_bwrap_dirs(base_dir: str | None = None) -> list[str]:
    """Unmount and remove the bwrap sandbox directories under ``base_dir`` (default: the
    backend's, ``ENVHUB_BWRAP_DIR`` or the temp dir) whose owner process is gone."""
    base = Path(base_dir or os.environ.get("ENVHUB_BWRAP_DIR") or tempfile.gettempdir())
    with open("/proc/self/mounts") as mounts:
        mounted = {line.split()[1] for line in mounts if line.split()[0] == SOURCE}
    reaped = []
    for directory in _orphaned_dirs(base, DIR_PREFIX):
        if str(directory) in mounted:
            unmount(directory)
        shutil.rmtree(directory, ignore_errors=True)
        reaped.append(str(directory))
    return reaped


def gc_local_dirs(base_dir: str | None = None) -> list[str]:
    """Remove the ``local`` sandbox directories under ``base_dir`` (default: the temp dir)
    whose owner process is gone (``envhub-local-<pid>-*``)."""
    reaped = []
    for directory in _orphaned_dirs(Path(base_dir or tempfile.gettempdir()), LOCAL_DIR_PREFIX):
        shutil.rmtree(directory, ignore_errors=True)
        reaped.append(str(directory))
    return reaped


def _orphaned_dirs(base: Path, prefix: str) -> list[Path]:
    """Directories ``<prefix><pid>-*`` under ``base`` whose owner pid is not running."""
    owned = re.compile(rf"^{re.escape(prefix)}(\d+)-")
    found = []
    for directory in sorted(base.glob(f"{prefix}*")):
        owner = owned.match(directory.name)
        if owner is not None and not os.path.exists(f"/proc/{owner.group(1)}"):
            found.append(directory)
    return found

"""Per-sandbox memory, pids and cpu cgroups for the ``bwrap`` backend, when the host allows.

Why cgroups and not only rlimits: RLIMIT_AS makes a memory bomb fail with ENOMEM
instead of being OOM-killed (and breaks runtimes that reserve address space), and
RLIMIT_NPROC counts all processes of a host uid, not one sandbox's. A cgroup gives a
true memory ceiling with an ``oom_kill`` counter and a per-sandbox ``pids.max``.
Needs write access to the cgroup file system (root, or a delegated subtree);
``Cgroup.create`` returns ``None`` otherwise and the caller falls back to rlimits.
Supports cgroup v1 (memory + pids hierarchies) and v2 (unified, with the memory and
pids controllers enabled for our subtree). The CPU quota (``cpus`` of the spec, as CFS
quota per 100 ms period) is best effort on top: where the cpu controller is missing or
not writable the sandbox still starts, with ``cpu_limited`` false.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

__all__ = ["Cgroup"]

_ROOT = Path("/sys/fs/cgroup")
_CPU_PERIOD_US = 100_000


def _own_paths() -> dict[str, str]:
    """Controller -> our cgroup path, from /proc/self/cgroup ('' key for v2)."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
            out[c] = path
    return out


def _base_dir(mount: Path, own: str) -> Path:
    candidate = mount / own.lstrip("/")
    return candidate if candidate.is_dir() else mount


class Cgroup:
    """One sandbox's cgroup directories (one per v1 hierarchy, or one v2 directory)."""

    def __init__(self, dirs: list[Path], v2: bool) -> None:
        self.dirs = dirs
        self.v2 = v2
        self.cpu_limited = False

    @classmethod
    def create(
        cls, name: str, *, memory: int, pids: int, cpus: float | None = None
    ) -> Cgroup | None:
        try:
            own = _own_paths()
            cg = cls._create(name, own=own, memory=memory, pids=pids)
        except OSError:
            return None
        if cg is not None and cpus is not None:
            cg._limit_cpu(name, own=own, cpus=cpus)
        return cg

    def _limit_cpu(self, name: str, *, own: dict[str, str], cpus: float) -> None:
        quota = max(1000, int(cpus * _CPU_PERIOD_US))
        try:
            if self.v2:
                parent = self.dirs[0].parent
                if "cpu" not in (parent / "cgroup.subtree_control").read_text().split():
                    (parent / "cgroup.subtree_control").write_text("+cpu")
                (self.dirs[0] / "cpu.max").write_text(f"{quota} {_CPU_PERIOD_US}")
            elif (_ROOT / "cpu").is_dir() and "cpu" in own:
                d = _base_dir(_ROOT / "cpu", own["cpu"]) / "envhub" / name
                d.mkdir(parents=True)
                self.dirs.append(d)
                (d / "cpu.cfs_period_us").write_text(str(_CPU_PERIOD_US))
                (d / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                return
        except OSError:
            return
        self.cpu_limited = True

    @classmethod
    def _create(cls, name: str, *, own: dict[str, str], memory: int, pids: int) -> Cgroup | None:
        if (_ROOT / "memory").is_dir() and (_ROOT / "pids").is_dir() and "memory" in own:
            mem = _base_dir(_ROOT / "memory", own["memory"]) / "envhub" / name
            pid = _base_dir(_ROOT / "pids", own.get("pids", "/")) / "envhub" / name
            cg = cls([mem, pid], v2=False)
            try:
                mem.mkdir(parents=True)
                pid.mkdir(parents=True)
                (mem / "memory.limit_in_bytes").write_text(str(memory))
                swap = mem / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(memory))
                (pid / "pids.max").write_text(str(pids))
            except OSError:
                cg.remove()
                raise
            return cg
        if (_ROOT / "cgroup.controllers").exists():
            parent = _base_dir(_ROOT, own.get("", "/")) / "envhub"
            parent.mkdir(exist_ok=True)
            wanted = {"memory", "pids"}
            if not wanted <= set((parent / "cgroup.subtree_control").read_text().split()):
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
            d = parent / name
            cg = cls([d], v2=True)
            try:
                d.mkdir()
                (d / "memory.max").write_text(str(memory))
                with contextlib.suppress(OSError):
                    (d / "memory.swap.max").write_text("0")
                (d / "pids.max").write_text(str(pids))
            except OSError:
                cg.remove()
                raise
            return cg
        return None

    def attach(self, pid: int | None = None) -> None:
        """Move ``pid`` (default: the calling process, e.g. in a preexec_fn) in."""
        me = str(pid if pid is not None else os.getpid())
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(me)

    def oom_kills(self) -> int:
        if self.v2:
            text = (self.dirs[0] / "memory.events").read_text()
        else:
            text = (self.dirs[0] / "memory.oom_control").read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def kill_all(self) -> None:
        if self.v2:
            kill_file = self.dirs[0] / "cgroup.kill"
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
                return
        for _ in range(50):
            pids = set()
            for d in self.dirs:
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            if not pids:
                return
            for p in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last killed tasks exit
                    time.sleep(0.01)

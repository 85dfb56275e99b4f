"""``local`` backend: a subprocess per command in a per-sandbox temp directory.

NO ISOLATION. Commands run as the calling user with the host's file system, network
and processes visible; only rlimits (CPU time, address space, file size, processes)
and a process-group kill on timeout protect the host from accidents, not from malice.
It is the embedded default because it needs nothing installed; use ``bwrap`` or
``docker`` for untrusted code. The sandbox's ``workdir`` (e.g. ``/work``) is mapped to
a host temp directory for file operations and as the commands' cwd, so environments
should use paths relative to the workdir. The directory is named after the owner
process (``envhub-local-<pid>-*``), so ``envhub sandbox gc`` removes those whose owner
died without closing them.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import resource
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from envhub.errors import SandboxError
from envhub.sandboxes._proc import kill_group, run_process, start_failure
from envhub.sandboxes.base import Argv, RawResult, Sandbox, SandboxSpec

__all__ = ["DIR_PREFIX", "LocalSandbox", "rlimit_preexec", "uid_process_count"]

DIR_PREFIX = "envhub-local-"
_COMMAND_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.E2BIG}
_BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def rlimit_preexec(
    limits: Mapping[int, int], then: Callable[[], None] | None = None
) -> Callable[[], None]:
    """Return a ``preexec_fn`` that sets hard+soft rlimits in the child before exec.

    Only async-signal-safe-ish work (setrlimit syscalls) happens here, which is why it is
    acceptable despite ``preexec_fn``'s caveats with threads.
    """

    items = list(limits.items())

    def _apply() -> None:
        for res, value in items:
            try:
                resource.setrlimit(res, (value, value))
            except (ValueError, OSError):
                _, hard = resource.getrlimit(res)
                if hard == resource.RLIM_INFINITY or value <= hard:
                    raise
                resource.setrlimit(res, (hard, hard))
        if then is not None:
            then()

    return _apply


def uid_process_count(uid: int | None = None) -> int:
    """How many processes ``uid`` (default: ours) runs now (RLIMIT_NPROC's count)."""
    uid = os.getuid() if uid is None else uid
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


class LocalSandbox(Sandbox):
    """Runs commands on the host in a temp directory (see module docstring)."""

    backend = "local"
    isolated = False

    def __init__(self, spec: SandboxSpec, *, base_dir: str | None = None) -> None:
        super().__init__(spec)
        self._base_dir = base_dir
        self.root: Path | None = None
        self._groups: set[int] = set()
        self._nproc = 0

    async def _start(self) -> None:
        self.root = Path(
            tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=self._base_dir)
        )
        (self.root / "work").mkdir()
        (self.root / "tmp").mkdir()
        # RLIMIT_NPROC counts every process of the user on the host, so the budget is
        # "what runs now + spec.pids", measured once.
        self._nproc = await asyncio.to_thread(uid_process_count) + self.spec.pids

    async def _close(self) -> None:
        for pgid in list(self._groups):
            kill_group(pgid)
        self._groups.clear()
        if self.root is not None:
            await asyncio.to_thread(shutil.rmtree, self.root, True)

    def host_path(self, path: str) -> Path:
        """Map a sandbox path (absolute under the workdir, or relative) to the host."""
        assert self.root is not None
        p = PurePosixPath(path)
        wd = PurePosixPath(self.spec.workdir)
        if p.is_absolute():
            if p == wd or wd in p.parents:
                p = p.relative_to(wd)
            elif p == PurePosixPath("/tmp") or PurePosixPath("/tmp") in p.parents:
                return self.root / "tmp" / p.relative_to("/tmp")
            else:
                return Path(p)
        return self.root / "work" / p

    def _resolve(self, path: str) -> str:
        return str(self.host_path(path))

    async def _run(
        self,
        argv: Argv,
        *,
        timeout: float,
        stdin: bytes | None,
        workdir: str | None,
        env: Mapping[str, str] | None,
        limit: int,
    ) -> RawResult:
        if self.root is None:
            raise SandboxError("local sandbox not started")
        cwd = self.host_path(workdir) if workdir else self.root / "work"
        full_env = {
            "PATH": os.environ.get("PATH", _BASE_PATH),
            "HOME": str(self.root / "work"),
            "TMPDIR": str(self.root / "tmp"),
            "LANG": "C.UTF-8",
            **self.spec.env,
            **(env or {}),
        }
        limits = {
            resource.RLIMIT_CPU: math.ceil(timeout) + 1,
            resource.RLIMIT_AS: int(self.spec.memory),
            resource.RLIMIT_FSIZE: int(self.spec.disk),
            resource.RLIMIT_NPROC: self._nproc,
            resource.RLIMIT_CORE: 0,
        }
        try:
            return await run_process(
                argv,
                timeout=timeout,
                limit=limit,
                stdin=stdin,
                cwd=str(cwd),
                env=full_env,
                preexec_fn=rlimit_preexec(limits),
                on_spawn=self._groups.add,
                on_exit=self._groups.discard,
            )
        except OSError as exc:
            # A missing or locked working directory (what commands did to their own
            # files), a missing program, arguments too long: the command's failure.
            if exc.errno not in _COMMAND_ERRNOS:
                raise
            return start_failure(argv[0], exc)

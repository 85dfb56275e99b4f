"""``bwrap`` backend: bubblewrap namespaces, one ``bwrap`` invocation per command.

A sandbox is a host directory (``work/`` bound at the spec's workdir, ``tmp/`` at
``/tmp``) plus, where the host allows, a memory+pids cgroup; holding one open costs no
process, which is why a thousand can be open at once. Each ``exec`` starts ``bwrap``
with new user/pid/net/ipc/uts/cgroup namespaces, the system (``/usr``, ``/etc`` or
``spec.root``) bound read-only, ``--die-with-parent`` and ``--disable-userns``.

Consequences worth knowing:
- The pid namespace ends with the command, so background processes never outlive
  the ``exec`` that started them (unlike docker).
- Run as root, envhub drops the ``bwrap`` process to an unprivileged host uid
  (``ENVHUB_BWRAP_UID``, default 65534) so host root-owned files stay unreadable
  per their modes; run as a normal user, commands run as that user in the namespace.
- Limits: cgroup ``memory``/``pids`` when writable (OOM kills are then reported),
  else RLIMIT_AS/RLIMIT_NPROC; ``cpus`` as a cgroup CPU quota where the cpu controller
  is writable too (else unenforced); RLIMIT_FSIZE caps single files. As root the
  workdir and ``/tmp`` share a tmpfs of ``spec.disk`` bytes (:mod:`._tmpfs`), so the
  cap is total and persists across execs; otherwise they share the host disk.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import resource
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from envhub.errors import SandboxError
from envhub.sandboxes._cgroup import Cgroup
from envhub.sandboxes._proc import kill_group, run_process, start_failure
from envhub.sandboxes._tmpfs import DIR_PREFIX, mount_tmpfs, unmount
from envhub.sandboxes.base import Argv, RawResult, Sandbox, SandboxSpec
from envhub.sandboxes.local import rlimit_preexec, uid_process_count

__all__ = ["BwrapSandbox", "bwrap_available"]

_SANDBOX_UID = 1000
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# bwrap's messages for a command that cannot start as given (its working directory made
# unusable by earlier commands, a missing or non-executable program): the command's
# failure, reported with a shell's exit codes, not the sandbox's
_COMMAND_FAILED = ("bwrap: Can't chdir to ", "bwrap: execvp ")


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


def bwrap_problem() -> str | None:
    """Why bwrap sandboxes cannot run on this host (None: they can).

    Installed is not enough: containers and hardened kernels often forbid the user
    namespaces bwrap needs, so this runs a trivial sandbox once.
    """
    if not bwrap_available():
        return "bwrap not installed"
    probe = subprocess.run(
        ["bwrap", "--unshare-user", "--unshare-net", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.decode().strip()}"
    return None


def _host_uid() -> int | None:
    """The unprivileged uid to run bwrap as when we are root (None: stay as we are)."""
    if os.geteuid() != 0:
        return None
    return int(os.environ.get("ENVHUB_BWRAP_UID", "65534"))


def _system_args(spec: SandboxSpec) -> list[str]:
    if spec.root is not None:
        return ["--ro-bind", str(spec.root), "/"]
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for p in _SYSTEM_LINKS:
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    return args


class BwrapSandbox(Sandbox):
    """Linux namespaces via bubblewrap (see module docstring)."""

    backend = "bwrap"
    isolated = True

    def __init__(
        self, spec: SandboxSpec, *, base_dir: str | None = None, cgroups: bool = True
    ) -> None:
        super().__init__(spec)
        self._base_dir = base_dir or os.environ.get("ENVHUB_BWRAP_DIR")
        self._use_cgroups = cgroups
        self._nproc = 0
        self.root: Path | None = None
        self.disk_limited = False  # the sandbox directory is a tmpfs of spec.disk
        self.cgroup: Cgroup | None = None
        self._groups: set[int] = set()
        self._prefix: list[str] = []
        self._uid = _host_uid()

    async def _start(self) -> None:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxError("bwrap not found: apt-get install bubblewrap")
        self.root = Path(
            tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=self._base_dir)
        )
        if self._uid is not None:  # root: the workdir and /tmp share a tmpfs of spec.disk
            self.disk_limited = await asyncio.to_thread(
                mount_tmpfs, self.root, int(self.spec.disk)
            )
        work, tmp = self.root / "work", self.root / "tmp"
        work.mkdir()
        tmp.mkdir()
        if self._uid is not None:
            os.chown(work, self._uid, self._uid)
            os.chown(tmp, self._uid, self._uid)
            os.chmod(self.root, 0o755)
        if self._use_cgroups:
            self.cgroup = Cgroup.create(
                f"{self.root.name}-{uuid.uuid4().hex[:6]}",
                memory=int(self.spec.memory),
                pids=self.spec.pids,
                cpus=self.spec.cpus,
            )
        if self.cgroup is None:
            # RLIMIT_NPROC is checked against every process of the host uid (up the
            # user-namespace chain), so the budget is "what that uid runs now + pids".
            self._nproc = await asyncio.to_thread(uid_process_count, self._uid) + self.spec.pids
        args = [bwrap, "--unshare-user", "--uid", str(_SANDBOX_UID), "--gid", str(_SANDBOX_UID)]
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.spec.network:
            args.append("--unshare-net")
        args += ["--disable-userns", "--die-with-parent", "--new-session"]
        args += ["--hostname", "envhub"]
        args += _system_args(self.spec)
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--bind", str(tmp), "/tmp", "--bind", str(work), self.spec.workdir]
        # bwrap builds / as a tmpfs owned by the sandbox user: make it read-only so
        # only the workdir and /tmp binds stay writable.
        args += ["--remount-ro", "/"]
        self._prefix = args

    async def _close(self) -> None:
        for pgid in list(self._groups):
            kill_group(pgid)
        self._groups.clear()
        if self.cgroup is not None:
            await asyncio.to_thread(self.cgroup.remove)
            self.cgroup = None
        if self.root is not None:
            if self.disk_limited:
                await asyncio.to_thread(unmount, self.root)
            await asyncio.to_thread(shutil.rmtree, self.root, True)

    def _preexec(self, timeout: float) -> Callable[[], None]:
        limits = {
            resource.RLIMIT_CPU: math.ceil(timeout) + 1,
            resource.RLIMIT_FSIZE: int(self.spec.disk),
            resource.RLIMIT_CORE: 0,
        }
        if self.cgroup is None:
            limits[resource.RLIMIT_AS] = int(self.spec.memory)
            limits[resource.RLIMIT_NPROC] = self._nproc
        cgroup, uid = self.cgroup, self._uid

        def _enter() -> None:
            if cgroup is not None:
                cgroup.attach()
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

        return rlimit_preexec(limits, then=_enter)

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
        if not self._prefix:
            raise SandboxError("bwrap sandbox not started")
        cwd = workdir or self.spec.workdir
        full_env = {
            "PATH": _PATH,
            "HOME": self.spec.workdir,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            **self.spec.env,
            **(env or {}),
        }
        cmd = [*self._prefix, "--chdir", cwd, "--", *argv]
        before = self.cgroup.oom_kills() if self.cgroup is not None else 0
        try:
            raw = await run_process(
                cmd,
                timeout=timeout,
                limit=limit,
                stdin=stdin,
                cwd=str(self.root),
                env=full_env,
                preexec_fn=self._preexec(timeout),
                on_spawn=self._groups.add,
                on_exit=self._groups.discard,
            )
        except OSError as exc:
            if exc.errno != errno.E2BIG:  # arguments too long: the command's failure
                raise
            return start_failure(argv[0], exc)
        if self.cgroup is not None and self.cgroup.oom_kills() > before:
            raw.oom_killed = True
        if raw.exit_code == 1 and raw.stderr.startswith(b"bwrap: "):
            message = raw.stderr.decode(errors="replace").strip()
            if message.startswith(_COMMAND_FAILED):
                missing = message.startswith(_COMMAND_FAILED[1]) and "No such file" in message
                code = 127 if missing else 126
                return raw.model_copy(update={"exit_code": code})
            raise SandboxError(message)  # bwrap itself failed: namespaces, mounts
        return raw

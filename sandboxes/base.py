"""The sandbox contract: ``SandboxSpec`` (what an environment asks for), ``ExecResult``
(what a command returns) and ``Sandbox`` (the small async interface every backend
implements).

Two kinds of failure, kept apart because they decide how an episode is scored:

- the *sandbox* cannot start or run commands (engine gone, container dead, closed,
  lifetime over): ``SandboxError``, an infrastructure failure that masks the episode;
- a command or file operation *ran* and failed (non-zero exit, timeout, OOM kill,
  missing file, permission denied, read-only file system): an ``ExecResult`` or
  ``FileOperationError``, the outcome of whatever the commands did, never a mask.

Why so small: environments must run unchanged on a laptop (``local``), on a shared
Linux box (``bwrap``) and in a cluster (``docker``). Backends only implement
``_start``/``_run``/``_close``; file transfer, output capping and the context-manager
lifecycle live here once, like httpx's transports over one ``BaseClient``.
"""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import ClassVar, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, field_validator

from envhub.errors import FileOperationError, SandboxError
from envhub.sandboxes.admission import admit

__all__ = ["BackendName", "ExecResult", "RawResult", "Sandbox", "SandboxSpec"]

BackendName = Literal["local", "bwrap", "docker"]

_MiB = 1024 * 1024


class SandboxSpec(BaseModel):
    """What an environment needs from its sandbox; the backend is chosen elsewhere.

    Sizes accept ints (bytes) or strings such as ``"512MiB"``. ``image`` is a recipe
    name from ``sandboxes/images/`` (``base``, ``python``) or any docker image reference;
    ``root`` is a directory used as the root file system by ``bwrap`` (default: the
    host's ``/usr`` read-only). ``local`` ignores both: it has no isolation.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["sandbox"] = "sandbox"
    image: str = "base"
    root: Path | None = None
    cpus: float = Field(1.0, gt=0)
    memory: ByteSize = Field(ByteSize(512 * _MiB), gt=0)
    pids: int = Field(256, ge=8)
    disk: ByteSize = Field(ByteSize(1024 * _MiB), gt=0, description="workdir size / max file size")
    tmpfs: ByteSize = Field(ByteSize(64 * _MiB), gt=0, description="size of /tmp")
    network: bool = False
    workdir: str = "/work"
    env: dict[str, str] = Field(default_factory=dict)
    max_lifetime_s: float | None = Field(3600.0, gt=0)
    output_limit: ByteSize = Field(ByteSize(256 * 1024), ge=1024, description="per stream")

    @field_validator("workdir")
    @classmethod
    def _absolute_workdir(cls, v: str) -> str:
        p = PurePosixPath(v)
        if not p.is_absolute() or ".." in p.parts or p == PurePosixPath("/"):
            raise ValueError("workdir must be an absolute path below / without '..'")
        return str(p)


class ExecResult(BaseModel):
    """Outcome of one command. ``stdout``/``stderr`` are capped at the spec's
    ``output_limit`` bytes each (head and tail kept, an inline marker in between);
    ``*_truncated`` says so and ``*_bytes`` gives the real size."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed


class RawResult(BaseModel):
    """Backend-level result: bytes, before decoding (used for file transfer too)."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False


Argv = Sequence[str]


class Sandbox(ABC):
    """One isolated place to run an episode's commands; never shared between episodes.

    Use as ``async with`` (or call ``start()``/``close()``). ``close()`` is idempotent
    and kills everything the sandbox started. ``max_lifetime_s`` is enforced: after it,
    ``exec`` raises ``SandboxError`` and the sandbox closes itself.
    """

    backend: ClassVar[str]
    isolated: ClassVar[bool]

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.closed = False
        self.started_at: float | None = None
        self._lifetime_timer: asyncio.TimerHandle | None = None
        self._closing: asyncio.Future[None] | None = None

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> Sandbox:
        """Start the sandbox; on failure everything half-started is released.

        The start waits for admission first (:mod:`envhub.sandboxes.admission`: this is
        the one seam every open and every pool refill goes through); not being admitted
        in time is a ``SandboxError`` like a failed start."""
        try:
            async with admit(self.backend):
                await self._start()
        except BaseException as exc:
            await asyncio.shield(self._safe_close())
            if isinstance(exc, SandboxError) or not isinstance(exc, Exception):
                raise  # already typed, or cancellation/interrupt: not ours to wrap
            raise SandboxError(f"{self.backend} sandbox failed to start: {exc}") from exc
        self.started_at = time.monotonic()
        if self.spec.max_lifetime_s is not None:
            self._lifetime_timer = asyncio.get_running_loop().call_later(
                self.spec.max_lifetime_s, self._expire
            )
        return self

    def _expire(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close_once())

    async def close(self) -> None:
        """Idempotent; concurrent callers (e.g. the lifetime timer) share one close."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close_once())
        await asyncio.shield(self._closing)

    async def _close_once(self) -> None:
        self.closed = True
        if self._lifetime_timer is not None:
            self._lifetime_timer.cancel()
        await self._close()

    async def _safe_close(self) -> None:
        """Release a half-started sandbox, keeping the start error as the one raised."""
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        self._closing = done
        self.closed = True
        try:
            await self._close()
        except Exception:
            pass

    async def __aenter__(self) -> Sandbox:
        if self.started_at is None:
            await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.close())

    # -- backend hooks ---------------------------------------------------------------
    @abstractmethod
    async def _start(self) -> None: ...

    @abstractmethod
    async def _close(self) -> None: ...

    @abstractmethod
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
        """Run ``argv`` inside the sandbox; keep at most ``limit`` bytes per stream."""

    # -- public API ------------------------------------------------------------------
    async def exec(
        self,
        cmd: str | Sequence[str],
        timeout: float = 60.0,
        stdin: str | bytes | None = None,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run a shell command (``str``, via ``sh -c``) or an argv list.

        Failures of the *command* (non-zero exit, timeout, OOM) are in the result;
        failures of the *sandbox* raise ``SandboxError``.
        """
        self._check_open()
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        raw = await self._run(
            argv,
            timeout=timeout,
            stdin=data,
            workdir=workdir,
            env=env,
            limit=int(self.spec.output_limit),
        )
        return ExecResult(
            exit_code=raw.exit_code,
            stdout=raw.stdout.decode("utf-8", "replace"),
            stderr=raw.stderr.decode("utf-8", "replace"),
            timed_out=raw.timed_out,
            oom_killed=raw.oom_killed,
            duration_s=raw.duration_s,
            stdout_truncated=raw.stdout_truncated,
            stderr_truncated=raw.stderr_truncated,
            stdout_bytes=raw.stdout_bytes,
            stderr_bytes=raw.stderr_bytes,
        )

    async def write_file(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        """Write a file (parents created); relative paths are relative to the workdir.
        ``FileOperationError`` if it cannot be written there."""
        self._check_open()
        blob = data.encode() if isinstance(data, str) else data
        target = self._resolve(path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
        raw = await self._transfer(["sh", "-c", script, "sh", target, f"{mode:o}"], blob)
        _check_transfer(raw, f"write_file {path}")

    async def read_file(self, path: str, *, max_bytes: int = 64 * _MiB) -> bytes:
        """Read a file's bytes; ``FileOperationError`` if it is missing, unreadable or
        larger than ``max_bytes``."""
        self._check_open()
        raw = await self._transfer(["cat", "--", self._resolve(path)], None, limit=max_bytes)
        _check_transfer(raw, f"read_file {path}")
        if raw.stdout_truncated:
            raise FileOperationError(f"read_file {path}: larger than {max_bytes} bytes")
        return raw.stdout

    async def upload_dir(self, local_dir: str | os.PathLike[str], dest: str) -> None:
        """Copy a host directory's contents into ``dest`` (tar through stdin);
        ``FileOperationError`` if ``dest`` cannot take them."""
        self._check_open()
        blob = await asyncio.to_thread(_tar_dir, Path(local_dir))
        target = self._resolve(dest)
        raw = await self._transfer(
            ["sh", "-c", 'mkdir -p -- "$1" && tar -x -f - -C "$1"', "sh", target], blob
        )
        _check_transfer(raw, f"upload_dir {dest}")

    async def download_dir(
        self, src: str, local_dir: str | os.PathLike[str], *, max_bytes: int = 512 * _MiB
    ) -> None:
        """Copy ``src``'s contents to a host directory. Extraction uses tarfile's
        ``data`` filter and skips what it rejects, so a hostile sandbox cannot plant
        links or paths outside ``local_dir``. ``FileOperationError`` if ``src`` cannot
        be archived or the archive is larger than ``max_bytes``."""
        self._check_open()
        raw = await self._transfer(
            ["tar", "-c", "-f", "-", "-C", self._resolve(src), "."], None, limit=max_bytes
        )
        _check_transfer(raw, f"download_dir {src}")
        if raw.stdout_truncated:
            raise FileOperationError(f"download_dir {src}: archive larger than {max_bytes} bytes")
        await asyncio.to_thread(_untar, raw.stdout, Path(local_dir))

    # -- helpers ---------------------------------------------------------------------
    async def _transfer(self, argv: Argv, stdin: bytes | None, *, limit: int = _MiB) -> RawResult:
        return await self._run(
            argv, timeout=300.0, stdin=stdin, workdir=None, env=None, limit=limit
        )

    def _resolve(self, path: str) -> str:
        p = PurePosixPath(path)
        return str(p if p.is_absolute() else PurePosixPath(self.spec.workdir) / p)

    def _check_open(self) -> None:
        if self.closed:
            raise SandboxError(f"{self.backend} sandbox is closed")
        if self.started_at is None:
            raise SandboxError(f"{self.backend} sandbox was not started")

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} {state} image={self.spec.image!r}>"


def _check_transfer(raw: RawResult, what: str) -> None:
    """The transfer command ran (a broken sandbox raised ``SandboxError`` in ``_run``); its
    failure is the file operation's."""
    if raw.timed_out:
        raise FileOperationError(f"{what}: timed out")
    if raw.exit_code != 0:
        detail = raw.stderr.decode(errors="replace").strip() or f"exit code {raw.exit_code}"
        raise FileOperationError(f"{what}: {detail}")


def _tar_dir(root: Path) -> bytes:
    if not root.is_dir():
        raise SandboxError(f"upload_dir: {root} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name)
    return buf.getvalue()


def _safe_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, but unsafe members (absolute or escaping links,
    device files) are skipped instead of aborting the whole download."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def _untar(blob: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
        tar.extractall(dest, filter=_safe_member)

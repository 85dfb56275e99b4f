"""A task's container: envhub's Docker sandbox with the task image's own file system.

:class:`~envhub.sandboxes.docker.DockerSandbox` is built for envhub's own images: a
read-only root and tmpfs over the workdir. A Harbor task's image is the task: its
Dockerfile put files in the workdir and expects a writable system, so this container
keeps the image's file system writable and its workdir's contents, and otherwise keeps
the sandbox's isolation: no network unless the task declares it, memory/cpu/pids limits,
``no-new-privileges``, a root init the commands cannot signal, leftovers labelled for
``envhub sandbox gc``.

The trust boundary (docs/bridges/harbor.md): the agent's commands run as uid 1000 (or
the task's ``[agent] user``) with no capabilities, owning only the workdir (chowned to it
at start) and what it creates in world-writable places. Grading runs as root (or the
task's ``[verifier] user``) with the few capabilities it needs (chown, reading any file,
signalling): :meth:`kill_agent` ends every process the agent left, ``/tests`` and
``/logs`` are made afresh by root after the agent's last command, and the verdict is
read from the frozen container through the engine (:meth:`read_verifier_dir`), so no
program in the container, the agent's or a tampered one, serves it.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envhub.errors import SandboxError
from envhub.sandboxes.docker import DockerSandbox, get_client

__all__ = ["AGENT_USER", "ROOT", "HarborContainer"]

AGENT_USER = "1000:1000"
ROOT = "0:0"
#: what grading needs as root: own files it did not create (chown the workdir, read and
#: write files of any owner) and kill the agent's leftovers; nothing else
_ROOT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"]
_VERIFIER_FILE_LIMIT = 1024 * 1024


class HarborContainer(DockerSandbox):
    """One episode's container of a task image (see module docstring)."""

    def __init__(self, spec: Any, *, agent_user: str = AGENT_USER) -> None:
        super().__init__(spec, pool="harbor")
        self.agent_user = agent_user
        self.exec_user = agent_user

    def _create_kwargs(self, image: str) -> dict[str, Any]:
        kwargs = super()._create_kwargs(image)
        # a task image's HEALTHCHECK would run for the container's whole life: nothing
        # here reads container health, so it is off
        kwargs.update(read_only=False, tmpfs={}, cap_drop=["ALL"], cap_add=_ROOT_CAPS,
                      healthcheck={"test": ["NONE"]})  # fmt: skip
        return kwargs

    @contextmanager
    def acting_as(self, user: str) -> Iterator[None]:
        """Run the commands inside the block as ``user`` ("uid:gid" or a name). The
        episode is sequential (agent, then grading), so the switch never interleaves."""
        previous, self.exec_user = self.exec_user, user
        try:
            yield
        finally:
            self.exec_user = previous

    async def start(self) -> HarborContainer:
        """Start, then give the agent its workdir (and ``/solution`` for the reference
        solution): a started container is ready for an episode, so a warm pool's are."""
        await super().start()
        try:
            await self._prepare()
        except BaseException:
            await asyncio.shield(self.close())
            raise
        return self

    async def _prepare(self) -> None:
        with self.acting_as(ROOT):
            r = await self.exec(
                ["sh", "-c", 'mkdir -p "$1" /solution && chown -R "$2" "$1" /solution',
                 "sh", self.spec.workdir, self.agent_user],
                timeout=120,
            )  # fmt: skip
        if not r.ok:
            raise SandboxError(f"preparing the task container failed: {r.stderr.strip()[-500:]}")

    async def kill_agent(self) -> None:
        """End every process the agent's user still has (background jobs, ``setsid``
        daemons): ``kill -9 -1`` as that user signals all of them and nothing of root's.
        An agent running as root (the task's choice) has nothing separate to kill."""
        if self.agent_user.split(":")[0] in ("0", "root"):
            return
        with self.acting_as(self.agent_user):
            await self.exec(["sh", "-c", "kill -9 -1"], timeout=30)

    async def put_root_dir(self, local_dir: Path, dest: str, executable: str) -> None:
        """Copy ``local_dir`` to the (existing, empty) ``dest`` as root-owned files through
        the engine's archive API, ``executable`` (a relative path) with mode 0755: no
        program in the container takes part, so none the agent left can alter the copy."""
        if self.container_id is None:
            raise SandboxError("docker sandbox not started")
        blob = await asyncio.to_thread(_root_tar, local_dir, executable)
        ok = await asyncio.to_thread(get_client().api.put_archive, self.container_id, dest, blob)
        if not ok:
            raise SandboxError(f"copying {local_dir} to {dest} in the container failed")

    async def read_verifier_dir(self, path: str) -> dict[str, bytes]:
        """The regular files directly in ``path`` (at most 1 MiB each), read with the
        container paused: every process frozen, through the engine's archive API, so no
        process started during grading can still write and no program in the container
        does the reading."""
        if self.container_id is None:
            raise SandboxError("docker sandbox not started")
        return await asyncio.to_thread(self._read_paused, self.container_id, path)

    @staticmethod
    def _read_paused(container_id: str, path: str) -> dict[str, bytes]:
        import docker.errors

        api = get_client().api
        try:
            api.pause(container_id)
        except docker.errors.APIError as exc:
            raise SandboxError(f"pausing the container to read the verdict: {exc}") from exc
        try:
            stream, _ = api.get_archive(container_id, path)
            blob = b"".join(stream)
        except docker.errors.NotFound:
            return {}
        except docker.errors.APIError as exc:
            raise SandboxError(f"reading {path} from the container: {exc}") from exc
        finally:
            try:
                api.unpause(container_id)
            except docker.errors.APIError:
                pass  # the container is closed right after grading anyway
        files: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if len(parts) == 2 and member.isfile() and member.size <= _VERIFIER_FILE_LIMIT:
                    f = tar.extractfile(member)
                    if f is not None:
                        files[parts[1]] = f.read()
        return files


def _root_tar(root: Path, executable: str) -> bytes:
    """``root``'s files and directories as a tar owned by root (links are not followed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            info = tar.gettarinfo(str(path), rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if rel == executable:
                info.mode = 0o755
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()

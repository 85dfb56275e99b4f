"""Build-once artefacts in envhub's shared cache directory.

Plugins build expensive things lazily on first use (databases, search indexes, git
checkouts, virtualenvs, docker images) and keep them under :func:`cache_root`. Many
episodes start at once (threads of a server, asyncio tasks, several processes of one
machine), so a first use must build an artefact exactly once while the others wait and
then reuse it. :func:`build_once` guarantees that for an artefact at ``path``:

- ``<path>.lock`` is held while checking and building: a file lock (``flock``), exclusive
  between processes and, since each acquisition opens the file anew, between threads of
  one process too; a crashed holder's lock is released by the kernel;
- the builder writes into a private temporary sibling, which is renamed onto ``path``
  when complete (a stale directory there is moved aside first), so no reader ever sees a
  half-built artefact and a failed or killed build leaves nothing at ``path``;
- ``<path>.stamp`` is written last and names what was built (a version, the pinned
  requirements...): an artefact whose stamp is missing or different is rebuilt.

:func:`locked` is the lock alone, for artefacts that are not files (a docker image
under a content-hash tag). Async code calls :func:`build_once_async`, which waits in a
worker thread so the event loop keeps running. Locks are not reentrant: a builder must
not ask for its own artefact.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["build_once", "build_once_async", "cache_root", "locked"]

_SCRATCH = ".build-"  # prefix of the temporary siblings, after ``.<name>``
_log = logging.getLogger(__name__)


def cache_root(kind: str | None = None) -> Path:
    """``$ENVHUB_CACHE`` (default ``~/.cache/envhub``), or its subdirectory ``kind``."""
    base = os.environ.get("ENVHUB_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "envhub"
    return root / kind if kind else root


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


@contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive lock of the artefact at ``path`` (the file ``<path>.lock``)."""
    from filelock import FileLock

    lock_file = _sidecar(Path(path), ".lock")
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    # a fresh FileLock per call: its own file description, so threads exclude each other
    with FileLock(lock_file):
        yield


def _is_built(path: Path, stamp: str) -> bool:
    try:
        return _sidecar(path, ".stamp").read_text("utf-8") == stamp and os.path.lexists(path)
    except FileNotFoundError:
        return False


def _install(built: Path, path: Path, scratch: Path) -> None:
    """Rename ``built`` onto ``path``. A file replaces a file atomically; a directory (or
    anything in a directory's way) is moved into ``scratch`` first, to be deleted."""
    if os.path.lexists(path) and (built.is_dir() or (path.is_dir() and not path.is_symlink())):
        os.rename(path, scratch / "stale")
    os.replace(built, path)


def build_once(
    path: str | os.PathLike[str], build: Callable[[Path], None], *, stamp: str = ""
) -> Path:
    """``path``, built first by ``build(tmp)`` unless it is there with this ``stamp``.

    ``build`` must create the artefact (a file or a directory) at ``tmp``, which does not
    exist yet; ``tmp`` has the artefact's name and its parent is private scratch space,
    removed afterwards. Exceptions from ``build`` propagate, leaving any previous
    artefact in place (but stale: its stamp is removed, so the next use rebuilds).
    """
    path = Path(path)
    if _is_built(path, stamp):
        return path
    with locked(path):
        if _is_built(path, stamp):  # built by whoever held the lock before us
            return path
        stamp_file = _sidecar(path, ".stamp")
        stamp_file.unlink(missing_ok=True)  # from here on the artefact is stale
        for leftover in path.parent.glob(f".{glob.escape(path.name)}{_SCRATCH}*"):
            shutil.rmtree(leftover, ignore_errors=True)  # from a killed build
        scratch = Path(tempfile.mkdtemp(prefix=f".{path.name}{_SCRATCH}", dir=path.parent))
        try:
            _log.info("building %s", path)
            built = scratch / path.name
            build(built)
            if not os.path.lexists(built):
                raise FileNotFoundError(f"the builder of {path} created nothing at {built}")
            _install(built, path, scratch)
            (scratch / "stamp").write_text(stamp, "utf-8")
            os.replace(scratch / "stamp", stamp_file)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return path


async def build_once_async(
    path: str | os.PathLike[str], build: Callable[[Path], None], *, stamp: str = ""
) -> Path:
    """:func:`build_once` from async code: waits and builds in a worker thread."""
    return await asyncio.to_thread(build_once, path, build, stamp=stamp)

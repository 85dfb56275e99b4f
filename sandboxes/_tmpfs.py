"""A size-capped tmpfs under a ``bwrap`` sandbox's directory, when envhub runs as root.

Why: without it the workdir and ``/tmp`` of a bwrap sandbox live on the host's disk and
only single files are capped (RLIMIT_FSIZE), so an agent writing many files could fill
the host. A tmpfs of ``spec.disk`` bytes makes the cap total (writes fail with ENOSPC),
and its pages are charged to the memory cgroup of the process that writes them, so they
count towards the sandbox's ``memory`` as docker's tmpfs workdir does. Mounting needs
CAP_SYS_ADMIN in the host namespace (root); otherwise the directory stays a plain one.

A SIGKILLed envhub cannot unmount, so the directories carry the owner's pid
(``envhub-bwrap-<pid>-*``) and :func:`envhub.sandboxes.gc.gc_bwrap_dirs` (``envhub sandbox
gc``) unmounts and removes those whose owner is gone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

__all__ = ["DIR_PREFIX", "SOURCE", "mount_tmpfs", "unmount"]

DIR_PREFIX = "envhub-bwrap-"
SOURCE = "envhub-bwrap"  # the mount's source name in /proc/self/mounts
_MS_NOSUID, _MS_NODEV = 2, 4  # <sys/mount.h>
_MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def mount_tmpfs(path: Path, size: int) -> bool:
    """Mount a tmpfs of ``size`` bytes (mode 0755, nosuid, nodev) on ``path``; False when
    this process may not mount (not root)."""
    options = f"size={size},mode=0755".encode()
    flags = _MS_NOSUID | _MS_NODEV
    if _libc.mount(SOURCE.encode(), os.fsencode(path), b"tmpfs", flags, options) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EPERM, errno.EACCES):
        return False
    raise OSError(code, f"mount tmpfs on {path}: {os.strerror(code)}")


def unmount(path: Path) -> None:
    """Detach the tmpfs on ``path`` (its memory is freed once nothing uses it)."""
    if _libc.umount2(os.fsencode(path), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        if code not in (errno.ENOENT, errno.EINVAL):  # nothing mounted there
            raise OSError(code, f"unmount {path}: {os.strerror(code)}")

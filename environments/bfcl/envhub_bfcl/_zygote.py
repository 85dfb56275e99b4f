"""The zygote BFCL's worker processes fork from (:mod:`envhub_bfcl.workers`).

A plain process (``python -c``), not ``multiprocessing``: a multiprocessing child re-runs
its parent's main script (``__mp_main__``), which breaks, or runs twice, any script that
calls ``envhub.make("bfcl")`` without a ``__main__`` guard. The zygote imports BFCL's
backends and checkers once, then for each socket its parent passes (``SCM_RIGHTS`` on
fd 0) forks a child that serves that socket alone: a start costs milliseconds, not the
second of a fresh interpreter importing BFCL.

The child's protocol on its socket: it sends ``{"pid": N}`` (so that its owner can kill
it through a pidfd), reads an 8-byte big-endian length and a pickle of ``(factory,
args)`` from its owner (trusted: the parent process), builds ``factory(*args)``, says
``{"ready": true}`` and answers request lines (``{"reply": text}`` or ``{"error": "Type:
message"}``) until the socket closes. It dies with the zygote (``PR_SET_PDEATHSIG``: the
zygote is its parent and has one thread), and the zygote exits when its channel to the
server closes, which the kernel does when the server dies, however it dies; so no worker
outlives the server. The zygote itself takes no death signal: that would follow the
*thread* that started it (an executor thread of whichever event loop asked first), and
the episodes of every other loop would lose their workers when that loop ended.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import pickle
import resource
import signal
import socket
from typing import Any, NoReturn

_PR_SET_PDEATHSIG = 1
_MAX_ERROR_CHARS = 2000


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _address_space() -> int:
    """This process's virtual size now: the cap is on top of what the fork inherits."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _send(sock: socket.socket, reply: dict[str, Any]) -> None:
    sock.sendall(json.dumps(reply).encode() + b"\n")


def _error(exc: BaseException) -> dict[str, Any]:
    return {"error": f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]}


def _child(sock: socket.socket, memory_bytes: int) -> NoReturn:
    """Serve one owner on ``sock``, under the memory cap, and exit."""
    _die_with_parent()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space() + memory_bytes,) * 2)
    _send(sock, {"pid": os.getpid()})
    with sock.makefile("rb") as stream:
        size = int.from_bytes(stream.read(8), "big")
        try:
            factory, args = pickle.loads(stream.read(size))
            handler = factory(*args)
        except Exception as exc:
            _send(sock, _error(exc))
            os._exit(0)
        _send(sock, {"ready": True})
        for line in stream:
            try:
                reply = {"reply": handler(line.decode())}
            except Exception as exc:  # the request's outcome, told to the owner
                reply = _error(exc)
            _send(sock, reply)
    os._exit(0)


def main(memory_bytes: int) -> None:
    """Import BFCL, say ``ready`` on fd 0, then fork a child per socket received there."""
    # everything a child imports, imported once here (bfcl_eval.utils alone is 10 ms)
    import bfcl_eval.utils  # noqa: F401
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (  # noqa: F401
        multi_turn_checker,
    )

    import envhub_bfcl.backends  # noqa: F401
    from envhub_bfcl.checker import _ast_checker, _mutable_defaults

    _ast_checker()
    _mutable_defaults()
    # what is imported now is every child's: frozen, no child's collector walks it, which
    # would write to every page of it (copy-on-write) and cost each child milliseconds
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    channel = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # a backend's print() must not reach the channel
        os.dup2(devnull, fd)
    channel.sendall(b"ready\n")
    while True:
        _, fds, _, _ = socket.recv_fds(channel, 1, 1)
        if not fds:
            return  # the server closed the channel: it is gone
        sock = socket.socket(fileno=fds[0])
        if os.fork() == 0:
            channel.close()
            _child(sock, memory_bytes)
        sock.close()

"""One disposable, confined child process per piece of hostile work, with one JSON reply.

Scorers that parse or ``eval`` a model's answer (Reasoning Gym's, a verifiers taskset's
reward functions) run in a warm worker process that never scores itself: each score is
forked into a child made for that request alone (the cost of a fork, not of an import).
This module is that fork, shared by every such worker:

- :func:`fork_confined` forks the child, which puts itself in its own process group,
  dies with its parent, replaces fds 0-2 with ``/dev/null`` and closes every other
  inherited fd (it cannot reach the worker's request or reply channel; the worker makes
  itself non-dumpable so ``/proc/<pid>/fd`` cannot reopen them), runs under CPU-time,
  file-size, core and optionally address-space limits with no new privileges, does its
  work, and sends one JSON line on a socket made for the request.
- :func:`read_reply` accepts exactly one well-formed reply from a child that exited
  cleanly, and kills the child's process group either way: whatever the work did is gone
  before the next request, so no request can influence another's reply.

Time is judged by CPU, never by the wall clock alone, so a verdict does not depend on
the machine's load: a child that uses up its CPU time (``timeout_s``, then ``SIGXCPU``)
timed out, the work's doing. A child is waited for while it keeps computing; one that
stops making progress (a window of ``timeout_s`` in which it got less than 5% of it in
CPU: blocked, or kept from running by a stalled machine) is ``"stalled"``, which a
worker reports as infrastructure, never as the answer's score.

Standard library only, and nothing of envhub's: the workers run in interpreters without
envhub (verifiers' own venv; a bubblewrap jail that binds only what scoring needs) and
load this file by path (``runpy.run_path(PATH)``, the path given on their command line).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import resource
import select
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["PATH", "forbid_fd_reopen", "fork_confined", "longest_wait_s", "read_reply"]

#: this file, for workers that load it by path (and jails that must bind it)
PATH = str(Path(__file__).resolve())

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_MAX_FILE_BYTES = 1 << 20
_FD_LIMIT = 1 << 20
_PROGRESS = 0.05  # the share of a window a running child gets even on a loaded machine


def _prctl(option: int, value: int) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def forbid_fd_reopen() -> None:
    """Make this (worker) process non-dumpable: its children cannot reopen its channels
    through ``/proc/<pid>/fd``."""
    _prctl(_PR_SET_DUMPABLE, 0)


def _address_space() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _confine(result_fd: int, timeout_s: float, memory_bytes: int | None) -> None:
    """Cut the child off from everything but its result socket, and limit it (no new
    privileges either: a setuid program it starts runs as the child)."""
    os.setpgid(0, 0)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, result_fd)
    os.closerange(result_fd + 1, _FD_LIMIT)
    cpu = math.ceil(timeout_s) + 1  # SIGXCPU, then SIGKILL a second on
    limits = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_FSIZE: (_MAX_FILE_BYTES, _MAX_FILE_BYTES),
        resource.RLIMIT_CORE: (0, 0),
    }
    if memory_bytes is not None:  # the child's size at fork plus the allowance
        space = _address_space() + memory_bytes
        limits[resource.RLIMIT_AS] = (space, space)
    for limit, values in limits.items():
        resource.setrlimit(limit, values)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def fork_confined(
    work: Callable[[], dict[str, Any]], timeout_s: float, memory_bytes: int | None = None
) -> tuple[int, socket.socket]:
    """Fork a child that confines itself, runs ``work`` and sends its reply; the child's
    pid and the socket to :func:`read_reply` it from. Call it from the thread that owns
    the process's locks (a fork copies only the calling thread)."""
    parent_end, child_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            parent_end.close()
            _confine(child_end.fileno(), timeout_s, memory_bytes)
            child_end.sendall(json.dumps(work()).encode() + b"\n")
        finally:
            os._exit(0)  # none of the worker's cleanup runs in the child
    child_end.close()
    try:
        os.setpgid(pid, pid)
    except OSError:  # it already did (or already exited)
        pass
    return pid, parent_end


def _cpu_seconds(pid: int) -> float:
    """The CPU time ``pid`` has used so far (0 once it is gone: a reply is on its way)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def longest_wait_s(timeout_s: float) -> float:
    """The longest :func:`read_reply` can wait for a child with ``timeout_s``: every
    window but the last brings at least 5% of a window of CPU, and the child's hard CPU
    limit ends it (a caller's deadline for the worker that reads the reply)."""
    return (math.ceil(timeout_s) + 2) / _PROGRESS + timeout_s


def _receive(
    result: socket.socket, pid: int, timeout_s: float, max_bytes: int
) -> tuple[bytes, bool]:
    """What the child sent until it closed its end (or more than a reply's worth), and
    whether it stalled first: a window of ``timeout_s`` passed in which it used less than
    :data:`_PROGRESS` of it in CPU. A child that keeps computing is waited for: its CPU
    limit ends it."""
    window_cpu = _cpu_seconds(pid)
    deadline = time.monotonic() + timeout_s
    data = b""
    while len(data) <= max_bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            used = _cpu_seconds(pid)
            if used - window_cpu < _PROGRESS * timeout_s:
                return data, True
            window_cpu, deadline = used, time.monotonic() + timeout_s
            continue
        if not select.select([result], [], [], remaining)[0]:
            continue
        chunk = result.recv(max_bytes + 1)
        if not chunk:
            break
        data += chunk
    return data, False


def read_reply(result: socket.socket, pid: int, timeout_s: float, max_bytes: int) -> dict[str, Any]:
    """The child's one reply, or ``{"error": kind}``: ``timeout`` (it used up its CPU
    time), ``stalled`` (it stopped making progress: blocked, or kept from running),
    ``died``, or ``unexpected`` (anything but one JSON object on one line of at most
    ``max_bytes``). Blocks: an event loop calls it in a thread."""
    with result:
        data, stalled = _receive(result, pid, timeout_s, max_bytes)
    for target in (pid, -pid):
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return {"error": "timeout"}
    if stalled:
        return {"error": "stalled"}
    if len(data) > max_bytes:
        return {"error": "unexpected"}
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0 or not data:
        return {"error": "died"}
    if data.count(b"\n") != 1 or not data.endswith(b"\n"):
        return {"error": "unexpected"}
    try:
        reply = json.loads(data)
    except ValueError:
        return {"error": "unexpected"}
    return reply if isinstance(reply, dict) else {"error": "unexpected"}

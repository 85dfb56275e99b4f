"""The scoring worker: a warm zygote that forks one disposable child per score.

Several Reasoning Gym scorers evaluate the answer text (``eval``, sympy's ``parse_expr``),
so the answer is hostile input to code that can run code. The plugin screens answers
before they get here (:mod:`.screen`); this process is the second line, built so that
even code that runs cannot forge another request's reply or keep anything:

- The zygote imports Reasoning Gym and builds datasets (trusted work), but never scores.
  Each score runs in a child forked for it, whose only channel is a socket made for that
  request. The child replaces fds 0-2 with ``/dev/null`` and closes every other inherited
  fd before scoring, so it cannot reach the zygote's request or reply channel, and the
  zygote is not dumpable, so its ``/proc/<pid>/fd`` cannot be reopened either (sockets,
  unlike pipes, cannot be reopened through ``/proc`` at all).
- The zygote reads at most one line from that socket until the child exits and accepts
  it only if it is exactly one well-formed reply and the child exited cleanly; anything
  else (two lines, garbage, a crash) is an error for this request only. The child, and
  everything the answer did in it, is gone before the next request: later scores cannot
  be influenced. A nonce would not do: the child is a copy of the zygote's memory.
- The child runs under the score's limits: address space (its size at fork plus the
  request's allowance), CPU time, file size, no core dumps, and it dies with the zygote.
- Error replies carry no text the answer controls: a kind, and for an exception its type
  name (the parent keeps only built-in exception names).

What still holds for code that runs in the child: it can forge its own request's score
(the screen is what keeps code from running at all). Under ``bwrap`` (the parent's
choice) the zygote has no network, no host files beyond the interpreter and packages, a
clean environment and its own PID namespace; without it the child runs as the server's
user on the host, contained only by the rules above.

Protocol on fds 0 (requests) and 1 (replies), a socket: the parent sends a 4-byte
big-endian length and a pickle of ``(dataset, config_json, entry, answer, timeout_s,
memory_bytes)``; the zygote answers ``{"ready": true}`` once at start, then per request
``{"scoring": true}`` once the dataset is built (not counted against the score timeout),
then one of ``{"score": float}``, ``{"error": "raised", "type": name}``, ``{"error":
"timeout"}``, ``{"error": "died"}``, ``{"error": "unexpected"}`` or ``{"error": "build",
"type": name}``: one JSON line each.
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import os
import pickle
import resource
import select
import signal
import socket
import struct
import time
from functools import lru_cache
from typing import Any, NoReturn

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_MAX_REPLY_BYTES = 4096
_MAX_FILE_BYTES = 1 << 20
_FD_LIMIT = 1 << 20


def _prctl(option: int, value: int) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


@lru_cache(maxsize=256)
def _dataset(name: str, config_json: str) -> Any:
    from reasoning_gym.factory import create_dataset

    return create_dataset(name, **json.loads(config_json))


def _address_space() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _confine(result_fd: int, timeout_s: float, memory_bytes: int) -> None:
    """Cut the child off from everything but its result socket, and limit it (no new
    privileges either: a setuid program it starts runs as the child)."""
    os.setpgid(0, 0)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, result_fd)
    os.closerange(result_fd + 1, _FD_LIMIT)
    limits = {
        resource.RLIMIT_AS: _address_space() + memory_bytes,
        resource.RLIMIT_CPU: math.ceil(timeout_s) + 1,  # SIGXCPU, then SIGKILL a second on
        resource.RLIMIT_FSIZE: _MAX_FILE_BYTES,
        resource.RLIMIT_CORE: 0,
    }
    for limit, value in limits.items():
        resource.setrlimit(limit, (value, value + (limit == resource.RLIMIT_CPU)))
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def _score(dataset: Any, entry: dict[str, Any], answer: str) -> dict[str, Any]:
    try:
        score = float(dataset.score_answer(answer, entry))
    except BaseException as exc:  # the scorer's own failure on this answer
        return {"error": "raised", "type": type(exc).__name__}
    if not (math.isfinite(score) and 0.0 <= score <= 1.0):
        return {"error": "out_of_range"}
    return {"score": score}


def _child(
    result: socket.socket, dataset: Any, entry: dict[str, Any], request: tuple[Any, ...]
) -> NoReturn:
    """Score in the forked child and exit without running any of the zygote's cleanup."""
    try:
        *_, answer, timeout_s, memory_bytes = request
        _confine(result.fileno(), timeout_s, memory_bytes)
        result.sendall(json.dumps(_score(dataset, entry, answer)).encode() + b"\n")
    finally:
        os._exit(0)


def _receive(result: socket.socket, timeout_s: float) -> tuple[bytes, bool]:
    """What the child sent until it closed its end (or more than a reply's worth), and
    whether the deadline passed first."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while len(data) <= _MAX_REPLY_BYTES:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([result], [], [], remaining)[0]:
            return data, True
        chunk = result.recv(_MAX_REPLY_BYTES + 1)
        if not chunk:
            break
        data += chunk
    return data, False


def _read_result(result: socket.socket, pid: int, timeout_s: float) -> dict[str, Any]:
    """The child's one reply; a child past the deadline, one that died, or one that sent
    anything but one reply is an error of this request. The child's process group is
    killed either way: nothing it started outlives its request."""
    data, timed_out = _receive(result, timeout_s)
    for target in (pid, -pid):
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    if timed_out or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU):
        return {"error": "timeout"}
    if len(data) > _MAX_REPLY_BYTES:
        return {"error": "unexpected"}
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return {"error": "died"}
    return _one_reply(data)


def _one_reply(data: bytes) -> dict[str, Any]:
    if data.count(b"\n") != 1 or not data.endswith(b"\n"):
        return {"error": "died" if not data else "unexpected"}
    try:
        reply = json.loads(data)
    except ValueError:
        return {"error": "unexpected"}
    if not isinstance(reply, dict):
        return {"error": "unexpected"}
    return reply


def _serve(
    name: str, config_json: str, request: tuple[Any, ...], replies: socket.socket
) -> dict[str, Any]:
    try:
        dataset = _dataset(name, config_json)
    except Exception as exc:  # the operator's config for this dataset does not build
        return {"error": "build", "type": type(exc).__name__}
    replies.sendall(b'{"scoring": true}\n')  # the parent's score timeout starts now
    entry, timeout_s = request[2], request[4]
    parent_end, child_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        parent_end.close()
        _child(child_end, dataset, entry, request)
    child_end.close()
    try:
        os.setpgid(pid, pid)
    except OSError:  # it already did (or already exited)
        pass
    with parent_end:
        return _read_result(parent_end, pid, timeout_s)


def _read_exactly(requests: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = requests.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def main() -> None:
    import reasoning_gym  # noqa: F401  (imported before the first request: seconds)

    _prctl(_PR_SET_DUMPABLE, 0)
    channel = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # a dataset's print() while it builds must not reach the channel
        os.dup2(devnull, fd)
    gc.freeze()  # what is imported now stays shared with the children, not copied
    channel.sendall(b'{"ready": true}\n')
    while True:
        header = _read_exactly(channel, 4)
        if not header:
            return
        (length,) = struct.unpack(">I", header)
        request = pickle.loads(_read_exactly(channel, length))  # from the parent: trusted
        reply = _serve(request[0], request[1], request, channel)
        channel.sendall(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    main()

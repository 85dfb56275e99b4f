"""The scoring worker: a warm zygote that forks one disposable child per score.

Several Reasoning Gym scorers evaluate the answer text (``eval``, sympy's ``parse_expr``),
so the answer is hostile input to code that can run code. The plugin screens answers
before they get here (:mod:`.screen`); this process is the second line, built so that
even code that runs cannot forge another request's reply or keep anything:

- The zygote imports Reasoning Gym and builds datasets (trusted work), but never scores.
  Each score runs in a child forked for it by envhub's
  :mod:`envhub.sandboxes.disposable_child` (its path is this script's argument: the
  zygote runs without envhub), whose only channel is a socket made for that request:
  the child cannot reach the zygote's request or reply channel, runs under the score's
  limits (address space: its size at fork plus the request's allowance; CPU time; file
  size; no core dumps), dies with the zygote, and is gone, with everything the answer
  did in it, before the next request. Only exactly one well-formed reply from a child
  that exited cleanly is accepted; anything else is an error of this request only. A
  nonce would not do: the child is a copy of the zygote's memory.
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
"build", "type": name}``, ``{"error": "out_of_range"}`` or one of the child's errors
(``timeout``, ``stalled``, ``died``, ``unexpected``): one JSON line each.
"""

from __future__ import annotations

import gc
import json
import math
import os
import pickle
import runpy
import socket
import struct
import sys
from functools import lru_cache, partial
from types import SimpleNamespace
from typing import Any

_MAX_REPLY_BYTES = 4096


@lru_cache(maxsize=256)
def _dataset(name: str, config_json: str) -> Any:
    from reasoning_gym.factory import create_dataset

    return create_dataset(name, **json.loads(config_json))


def _score(dataset: Any, entry: dict[str, Any], answer: str) -> dict[str, Any]:
    try:
        score = float(dataset.score_answer(answer, entry))
    except BaseException as exc:  # the scorer's own failure on this answer
        return {"error": "raised", "type": type(exc).__name__}
    if not (math.isfinite(score) and 0.0 <= score <= 1.0):
        return {"error": "out_of_range"}
    return {"score": score}


def _serve(
    child: Any, name: str, config_json: str, request: tuple[Any, ...], replies: socket.socket
) -> dict[str, Any]:
    try:
        dataset = _dataset(name, config_json)
    except Exception as exc:  # the operator's config for this dataset does not build
        return {"error": "build", "type": type(exc).__name__}
    replies.sendall(b'{"scoring": true}\n')  # the parent's score timeout starts now
    entry, answer, timeout_s, memory_bytes = request[2:6]
    work = partial(_score, dataset, entry, answer)  # runs in the child
    pid, result = child.fork_confined(work, timeout_s, memory_bytes)
    return child.read_reply(result, pid, timeout_s, _MAX_REPLY_BYTES)


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

    child = SimpleNamespace(**runpy.run_path(sys.argv[1]))  # envhub's disposable_child
    child.forbid_fd_reopen()
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
        reply = _serve(child, request[0], request[1], request, channel)
        channel.sendall(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    main()

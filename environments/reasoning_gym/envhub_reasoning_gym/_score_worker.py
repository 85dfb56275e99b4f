"""The scoring worker: calls a dataset's ``score_answer`` for the parent process.

Several Reasoning Gym scorers ``eval`` the answer text (directly, or through sympy's
``parse_expr``), so scoring runs here, not in the server: a hung or memory-hungry score
is killed with this process, and under ``bwrap`` the process has no network and a
read-only file system. Protocol on stdin/stdout: the parent sends a 4-byte big-endian
length and a pickle of ``(dataset, config_json, entry, answer)``; the worker answers
``{"scoring": true}`` once it has built the dataset (data files, word lists: seconds
under load, not counted against the score timeout), then ``{"score": float}`` or
``{"error": "..."}``: one JSON line each. Anything a scorer prints
goes to stderr.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import sys
from functools import lru_cache
from typing import Any, BinaryIO


@lru_cache(maxsize=256)
def _dataset(name: str, config_json: str) -> Any:
    from reasoning_gym.factory import create_dataset

    return create_dataset(name, **json.loads(config_json))


def _score(payload: bytes, replies: BinaryIO) -> dict[str, Any]:
    name, config_json, entry, answer = pickle.loads(payload)  # from the parent: trusted
    try:
        dataset = _dataset(name, config_json)
    except Exception as exc:
        return {"error": f"building {name}: {type(exc).__name__}: {exc}"[:500]}
    replies.write(b'{"scoring": true}\n')  # the parent's score timeout starts now
    replies.flush()
    try:
        return {"score": float(dataset.score_answer(answer, entry))}
    except Exception as exc:  # the scorer's own failure on this answer
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def main() -> None:
    import reasoning_gym  # noqa: F401  (imported before the first request: seconds)

    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a scorer's print() must not corrupt the protocol
    requests = sys.stdin.buffer
    replies.write(b'{"ready": true}\n')
    replies.flush()
    while True:
        header = requests.read(4)
        if len(header) < 4:
            return
        (length,) = struct.unpack(">I", header)
        reply = _score(requests.read(length), replies)
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    main()

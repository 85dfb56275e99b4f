"""The disposable child that scorers fork per score: verdicts by CPU, never by load, and
exactly one well-formed reply or an error of that request alone."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from envhub.sandboxes.disposable_child import fork_confined, read_reply


def _run(work: Callable[[], dict[str, Any]], timeout_s: float = 5.0) -> dict[str, Any]:
    pid, result = fork_confined(work, timeout_s, memory_bytes=64 << 20)
    return read_reply(result, pid, timeout_s, 4096)


def _spin() -> dict[str, Any]:
    while True:
        pass


def _block() -> dict[str, Any]:
    time.sleep(60)
    return {"score": 1.0}


def _two_replies() -> dict[str, Any]:
    for fd in range(3, 64):  # the result socket is the child's only fd past 2
        try:
            os.write(fd, b'{"score": 1.0}\n')
        except OSError:
            pass
    return {"score": 1.0}


def _allocate() -> dict[str, Any]:
    return {"size": len(bytearray(256 << 20))}


def _fds() -> dict[str, Any]:
    return {"fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))}


@pytest.mark.parametrize(
    ("work", "timeout_s", "reply"),
    [
        (lambda: {"score": 0.5}, 5.0, {"score": 0.5}),
        (_spin, 1.0, {"error": "timeout"}),  # used up its CPU time: the work's doing
        (_block, 1.0, {"error": "stalled"}),  # no progress for a window: infrastructure
        (_two_replies, 5.0, {"error": "unexpected"}),
        (lambda: os._exit(3), 5.0, {"error": "died"}),
        (_allocate, 5.0, {"error": "died"}),  # MemoryError past the allowance kills it
    ],
    ids=["reply", "spin", "block", "two-replies", "exit", "memory"],
)
def test_a_childs_one_reply_or_the_error_of_its_request(
    work: Callable[[], dict[str, Any]], timeout_s: float, reply: dict[str, Any]
) -> None:
    assert _run(work, timeout_s) == reply


def test_the_child_holds_only_its_result_socket_and_is_gone_after_its_reply() -> None:
    """fds 0-2 are /dev/null, then the result socket and the listing's own fd: nothing
    of the parent's channels; the child's process group is killed after it."""
    pid, result = fork_confined(_fds, 5.0)
    fds = read_reply(result, pid, 5.0, 4096)["fds"]
    assert fds[:3] == [0, 1, 2] and len(fds) == 5, fds
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)

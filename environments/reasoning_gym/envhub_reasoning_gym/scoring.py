"""Scoring answers with the dataset's own ``score_answer``, in confined worker processes.

:class:`ScorerPool` keeps a few long-lived workers (:mod:`._score_worker`: each imports
Reasoning Gym once and forks a fresh child per score, so a reply is bound to its request
and nothing a score does survives it) and hands one request at a time to an idle one.

Every worker runs confined; there is no unconfined mode:

- ``bwrap=True`` (the environment asks for it whenever bubblewrap works on the host):
  new user, PID, network, IPC, UTS and cgroup namespaces, no capabilities, no network;
  the file system is the interpreter, its packages and the worker script, read-only, a
  16 MiB ``/tmp`` and a read-only ``/dev``: no host file beyond what scoring needs.
- Always: an environment that names nothing of the server's (:func:`_worker_environment`:
  no ``ENVHUB_TOKEN``, no API keys), ``python -I`` (no ``PYTHON*`` variables, no user
  site), and per score an address-space allowance, a CPU-time limit and a file-size cap.

Without bubblewrap the worker runs as the server's user with the host's file system and
network: the per-score child, the stripped environment and the limits still hold, but
code that ran in it could act as that user, so the answer screen (:mod:`.screen`) is
then the only barrier against code. Install bubblewrap on any server that scores
untrusted answers.

A score that takes longer than its timeout while it computes kills its child (reward 0,
the reason in the error): the answer made the scorer work that long. A child the machine
kept from running (:mod:`envhub.sandboxes.disposable_child` tells the two apart by the
CPU it used), or a worker that stops answering or answers anything but its protocol (it
is discarded, never returned to the pool), is infrastructure: the score is asked once
more, then the episode is masked, never scored 0. Errors are fixed phrases (:func:`_outcome`): no
text a scored answer controls reaches the caller.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import pickle
import queue
import select
import shutil
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.errors import SandboxError
from envhub.sandboxes import disposable_child

__all__ = ["DEFAULT_MEMORY_BYTES", "Outcome", "ScorerPool"]

#: what one score may allocate beyond the worker's own size
DEFAULT_MEMORY_BYTES = 1 << 30
_WORKER = Path(__file__).with_name("_score_worker.py")
_GRACE_S = 10.0  # past the child's longest wait, how long the worker has to report its end
_TMP_BYTES = 16 << 20
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass(frozen=True)
class Outcome:
    """A score (``None`` when there is none) and why not."""

    score: float | None
    error: str | None = None


def _worker_environment(tmp: str) -> dict[str, str]:
    """The worker's whole environment: nothing of the server's is passed on."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": tmp,
        "TMPDIR": tmp,
        "MPLCONFIGDIR": tmp,  # matplotlib (imported by a dataset) wants a writable dir
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


def _interpreter_paths() -> list[str]:
    """What the worker reads: the interpreter, its standard library and packages,
    Reasoning Gym (with its data files) and the worker script; outermost first."""
    import reasoning_gym

    paths = sysconfig.get_paths()
    places = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parents[1])}
    places |= {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    places |= {str(Path(reasoning_gym.__file__).parent), str(_WORKER), disposable_child.PATH}
    resolved = sorted({Path(place).resolve() for place in places} | {Path(p) for p in places})
    existing = [path for path in resolved if path.exists()]
    return [str(p) for p in existing if not any(p != q and p.is_relative_to(q) for q in existing)]


def _system_binds() -> list[str]:
    args = []
    for place in _SYSTEM_DIRS:
        if os.path.islink(place):
            args += ["--symlink", os.readlink(place), place]
        elif os.path.isdir(place):
            args += ["--ro-bind", place, place]
    return args


def _bwrap_prefix() -> list[str]:
    if shutil.which("bwrap") is None:
        raise SandboxError("the bwrap backend needs bubblewrap (apt-get install bubblewrap)")
    code = [arg for path in _interpreter_paths() for arg in ("--ro-bind", path, path)]
    return [
        "bwrap", "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
        "--hostname", "scorer", "--disable-userns", "--die-with-parent", "--new-session",
        "--cap-drop", "ALL", *_system_binds(), "--proc", "/proc", "--dev", "/dev",
        "--remount-ro", "/dev", "--size", str(_TMP_BYTES), "--tmpfs", "/tmp", *code,
        "--remount-ro", "/", "--chdir", "/",
    ]  # fmt: skip


def _builtin_exception(name: Any) -> str:
    """``name`` if it names a built-in exception, else a fixed word: a scored answer
    can define a class with any name, so only Python's own names are repeated."""
    value = getattr(builtins, name, None) if isinstance(name, str) else None
    if isinstance(value, type) and issubclass(value, BaseException):
        return name
    return "an exception"


def _outcome(reply: Any, timeout_s: float) -> Outcome | None:
    """The outcome a well-formed worker reply stands for (``None``: not well formed)."""
    if not isinstance(reply, dict):
        return None
    score = reply.get("score")
    if type(score) is float and math.isfinite(score) and 0.0 <= score <= 1.0:
        return Outcome(score)
    kind = reply.get("error")
    if kind == "raised":
        return Outcome(None, f"score_answer raised {_builtin_exception(reply.get('type'))}")
    if kind == "build":
        return Outcome(None, f"the dataset did not build ({_builtin_exception(reply.get('type'))})")
    messages = {
        "timeout": f"scoring took longer than {timeout_s:g}s",
        "died": "the scoring process died (a crash or a resource limit)",
        "unexpected": "the scoring process sent an unexpected reply",
        "out_of_range": "score_answer returned a value that is not a float in [0, 1]",
    }
    return Outcome(None, messages[kind]) if kind in messages else None


class _Worker:
    """One worker process and the socket it is spoken to over (its fds 0 and 1)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.channel, theirs = socket.socketpair()
        with theirs:
            self.proc = subprocess.Popen(
                argv,
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                stderr=subprocess.DEVNULL,
                env=env,
                cwd="/",
            )
        self.buffer = b""

    def send(self, payload: bytes) -> None:
        self.channel.sendall(struct.pack(">I", len(payload)) + payload)

    def read_line(self, deadline: float) -> bytes | None:
        """The next reply line, or ``None`` at the deadline or when the worker is gone."""
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.channel], [], [], remaining)[0]:
                return None
            chunk = self.channel.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.channel.close()


class ScorerPool:
    """Up to ``size`` scoring workers, started on demand, shared by all episodes of a
    process (thread-safe: rewards are computed in worker threads). ``bwrap``: run them
    under bubblewrap; ``memory_bytes``: what one score may allocate."""

    def __init__(
        self,
        size: int,
        *,
        bwrap: bool = False,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.size = size
        self.memory_bytes = memory_bytes
        self.start_timeout_s = start_timeout_s
        prefix = _bwrap_prefix() if bwrap else []
        self._tmp = "/tmp" if bwrap else tempfile.mkdtemp(prefix="envhub-rg-scorer-")
        self.argv = [*prefix, sys.executable, "-I", "-B", str(_WORKER), disposable_child.PATH]
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._started = 0
        self._lock = threading.Lock()

    def _acquire(self) -> _Worker:
        """An idle worker, or a new one while fewer than ``size`` run. Waiting for an idle
        one polls: a worker that failed to start frees its slot without ever becoming
        idle, and a waiter must then start one itself rather than wait for ever."""
        while True:
            with self._lock:
                try:
                    return self._idle.get_nowait()
                except queue.Empty:
                    pass
                start = self._started < self.size
                if start:
                    self._started += 1
            if start:
                break
            try:
                return self._idle.get(timeout=0.25)
            except queue.Empty:
                continue
        try:
            worker = _Worker(self.argv, _worker_environment(self._tmp))
            if worker.read_line(time.monotonic() + self.start_timeout_s) != b'{"ready": true}':
                worker.kill()
                raise RuntimeError("the Reasoning Gym scoring worker did not start")
        except BaseException:
            with self._lock:
                self._started -= 1
            raise
        return worker

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._started -= 1

    def score(
        self, dataset: str, config_json: str, entry: dict[str, Any], answer: str, timeout_s: float
    ) -> Outcome:
        """``score_answer(answer, entry)`` of ``dataset`` built with ``config_json``. A
        score the machine kept from happening (a worker that did not answer, or a child
        that stalled) is asked once more, of another worker; a second such failure is a
        :class:`~envhub.errors.SandboxError`: infrastructure, masked, never a score."""
        request = (dataset, config_json, entry, answer, timeout_s, self.memory_bytes)
        for _ in range(2):
            outcome = self._score_once(request, timeout_s)
            if outcome is not None:
                return outcome
        raise SandboxError(
            f"the Reasoning Gym scorer could not score twice ({dataset}): its worker was "
            "lost or stalled (a loaded machine), not the answer's doing"
        )

    def _score_once(self, request: tuple[Any, ...], timeout_s: float) -> Outcome | None:
        """One worker's outcome for ``request``, or ``None`` when the worker did not give
        one (it is then discarded) or the child stalled."""
        worker = self._acquire()
        try:
            worker.send(pickle.dumps(request))
            line = worker.read_line(time.monotonic() + self.start_timeout_s)
            if line == b'{"scoring": true}':
                wait_s = disposable_child.longest_wait_s(timeout_s) + _GRACE_S
                line = worker.read_line(time.monotonic() + wait_s)
        except OSError:
            line = None
        try:
            reply = None if line is None else json.loads(line)
        except ValueError:
            reply = None
        outcome = _outcome(reply, timeout_s)
        if worker.buffer or (outcome is None and reply != {"error": "stalled"}):
            self._discard(worker)
            return None
        self._idle.put(worker)  # a stalled child leaves a working worker
        return outcome

    def close(self) -> None:
        """Stop the idle workers (one busy now goes back to the pool; the next close stops it)."""
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                break
            self._discard(worker)
        if self._tmp != "/tmp":
            shutil.rmtree(self._tmp, ignore_errors=True)

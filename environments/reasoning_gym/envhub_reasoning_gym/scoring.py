"""Scoring answers with the dataset's own ``score_answer``, in worker processes.

:class:`ScorerPool` keeps a few long-lived workers (:mod:`._score_worker`; each imports
Reasoning Gym once) and hands one request at a time to an idle one. A score that takes
longer than the timeout kills its worker (a new one starts on demand) and counts as an
error, never a hang of the server. With the ``bwrap`` backend the workers run under
bubblewrap: host file system read-only, no network, own PID namespace.

A worker's reply is untrusted (the answer it scored may have run code in it): only a
finite float in [0, 1] is accepted as a score.

Before any worker sees it, an answer to a dataset whose scorer evaluates text as Python
(:data:`EVALUATING_DATASETS`) must be a plain expression (:func:`plain_expression`):
numbers, names, operators and calls of names, or literals. Anything else (attributes,
subscripts, strings, lambdas, comprehensions) scores 0 without being evaluated.
"""

from __future__ import annotations

import ast
import json
import math
import os
import pickle
import queue
import select
import shutil
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["EVALUATING_DATASETS", "Outcome", "ScorerPool", "plain_expression"]

#: datasets whose score_answer runs ``eval`` or sympy's ``parse_expr`` on the answer
EVALUATING_DATASETS = frozenset(
    {
        "binary_matrix",
        "countdown",
        "intermediate_integration",
        "n_queens",
        "polynomial_multiplication",
        "puzzle24",
        "simple_integration",
        "spiral_matrix",
        "string_insertion",
    }
)
_MAX_EVAL_CHARS = 2000

_PLAIN_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Name, ast.Load,
    ast.Call, ast.List, ast.Tuple, ast.Constant,
)  # fmt: skip


#: the functions a plain expression may call: what sympy answers (integrals) contain
_CALLABLE = frozenset(
    "exp log ln sqrt sin cos tan cot sec csc asin acos atan acot sinh cosh tanh asinh acosh "
    "atanh Abs abs factorial Integral".split()
)
_EXPONENT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.UAdd, ast.USub)
_MAX_EXPONENT = 64


def _small_exponent(node: ast.expr) -> bool:
    """An exponent of numbers and + - * / only (no powers, no names), at most 64 in size."""
    for part in ast.walk(node):
        if isinstance(part, ast.BinOp | ast.UnaryOp) and isinstance(part.op, _EXPONENT_OPS):
            continue
        if isinstance(part, ast.Constant) and isinstance(part.value, int | float):
            continue
        if isinstance(part, ast.operator | ast.unaryop):
            continue
        return False
    try:
        value = eval(compile(ast.Expression(node), "<exponent>", "eval"), {"__builtins__": {}})
    except (ArithmeticError, ValueError):
        return False
    return bool(abs(value) <= _MAX_EXPONENT)


def plain_expression(text: str) -> bool:
    """Whether ``text`` is safe to hand to ``eval``: it parses as one Python expression
    made only of numbers, one-character strings, names not starting with ``_``,
    arithmetic with small exponents, calls of math functions (:data:`_CALLABLE`), and
    lists/tuples; or it does not parse as Python at all and has no ``__``/``lambda`` (the
    scorer then fails on it too, before running anything)."""
    if len(text) > _MAX_EVAL_CHARS:
        return False
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return "__" not in text and "lambda" not in text
    for node in ast.walk(tree):
        if not isinstance(node, _PLAIN_NODES):
            return False
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            return False
        if isinstance(node, ast.Call) and (
            not isinstance(node.func, ast.Name) or node.func.id not in _CALLABLE or node.keywords
        ):
            return False
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | complex):
            if not (isinstance(node.value, str) and len(node.value) <= 1):  # ['a', 'b'] lists
                return False
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            if not _small_exponent(node.right):
                return False
    return True


@dataclass(frozen=True)
class Outcome:
    """A score (``None`` when there is none) and why not."""

    score: float | None
    error: str | None = None


class _Worker:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        )
        self.buffer = b""

    def read_line(self, deadline: float) -> bytes | None:
        """The next reply line, or ``None`` at the deadline or when the worker is gone."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _code_under_tmp() -> list[str]:
    """The worker's interpreter and code that live under ``/tmp`` (a venv or a checkout
    there), outermost first: the sandbox's fresh ``/tmp`` must still show them."""
    import reasoning_gym

    import envhub

    places = {sys.prefix, *sys.path}
    places |= {str(Path(m.__file__).resolve().parents[1]) for m in (envhub, reasoning_gym)}
    places.add(str(Path(__file__).resolve().parents[1]))
    resolved = {Path(place).resolve() for place in places if place}
    under = sorted(p for p in resolved if p.is_relative_to("/tmp") and p.exists())
    outermost = [p for p in under if not any(p != q and p.is_relative_to(q) for q in under)]
    return [str(p) for p in outermost]


def _bwrap_prefix() -> list[str]:
    if shutil.which("bwrap") is None:
        from envhub.errors import SandboxError

        raise SandboxError("the bwrap backend needs bubblewrap (apt-get install bubblewrap)")
    keep = [arg for path in _code_under_tmp() for arg in ("--ro-bind", path, path)]
    return [
        "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        *keep, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--die-with-parent",
        "--new-session",
    ]  # fmt: skip


class ScorerPool:
    """Up to ``size`` scoring workers, started on demand, shared by all episodes of a
    process (thread-safe: rewards are computed in worker threads)."""

    def __init__(self, size: int, *, bwrap: bool = False, start_timeout_s: float = 60.0) -> None:
        self.size = size
        self.start_timeout_s = start_timeout_s
        self.argv = (_bwrap_prefix() if bwrap else []) + [
            sys.executable, "-m", "envhub_reasoning_gym._score_worker",
        ]  # fmt: skip
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
            worker = _Worker(self.argv)
            if worker.read_line(time.monotonic() + self.start_timeout_s) is None:
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
        """``score_answer(answer, entry)`` of ``dataset`` built with ``config_json``."""
        payload = pickle.dumps((dataset, config_json, entry, answer))
        worker = self._acquire()
        try:
            assert worker.proc.stdin is not None
            worker.proc.stdin.write(struct.pack(">I", len(payload)) + payload)
            worker.proc.stdin.flush()
            line = worker.read_line(time.monotonic() + self.start_timeout_s)
            if line == b'{"scoring": true}':
                line = worker.read_line(time.monotonic() + timeout_s)
        except (BrokenPipeError, OSError):
            line = None
        if line is None:
            self._discard(worker)
            return Outcome(None, f"scoring took longer than {timeout_s:g}s or its worker died")
        self._idle.put(worker)
        try:
            reply = json.loads(line)
        except ValueError:
            return Outcome(None, "the scoring worker sent an unreadable reply")
        if not isinstance(reply, dict):
            return Outcome(None, "the scoring worker sent an unreadable reply")
        score = reply.get("score")
        if isinstance(score, float) and math.isfinite(score) and 0.0 <= score <= 1.0:
            return Outcome(score)
        if "error" in reply:
            return Outcome(None, str(reply["error"])[:500])
        return Outcome(None, f"score_answer returned {str(score)[:40]}, not a float in [0, 1]")

    def close(self) -> None:
        """Stop the idle workers (one busy now goes back to the pool; the next close stops it)."""
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                return
            self._discard(worker)

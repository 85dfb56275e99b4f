"""The envhub side of the bridge: one verifiers worker process per option set.

verifiers 0.4 pins ``mcp==2.0.0`` and ``openai<3``, which envhub's own pins exclude, so
verifiers lives in its own venv (``.ci/verifiers_setup.sh`` builds it under
``$ENVHUB_CACHE/verifiers-0.4/venv``) and the bridge reaches it through a child process
started with that venv's Python, running :mod:`envhub_verifiers._worker` (standard library
plus verifiers). Requests and replies are JSON lines; importing verifiers takes seconds,
so one process serves every episode of a (python, taskset, options) key and each
episode keeps its own state there; it scores each episode in a child forked for it
(:mod:`envhub_verifiers._worker` says why and how).

A worker that dies or answers garbage is an infrastructure failure
(:class:`~envhub.errors.SandboxError`, as the MCP bridge reports a lost server: the
episode is masked, never scored), and the next episode starts a fresh worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.errors import EnvironmentFailure, JudgeError, SandboxError, ToolError
from envhub.runtime.cache import cache_root
from envhub.runtime.loop_thread import LoopThread
from envhub.sandboxes import disposable_child

__all__ = [
    "WorkerError",
    "WorkerKey",
    "bridge_loop",
    "default_python",
    "stop_workers",
    "worker_for",
]

_WORKER_SCRIPT = Path(__file__).with_name("_worker.py")


def default_python() -> Path:
    """The interpreter of the venv ``.ci/verifiers_setup.sh`` builds."""
    return cache_root("verifiers-0.4") / "venv" / "bin" / "python"


class WorkerError(ToolError):
    """The model's tool call failed inside verifiers (the tool raised or refused it): an
    error observation the model reads."""


@dataclass(frozen=True)
class WorkerKey:
    """What one worker process is started with (all of it operator options)."""

    python: str
    taskset: str
    kwargs_json: str
    path: tuple[str, ...]
    startup_timeout_s: float
    score_timeout_s: float


class Worker:
    """One worker process; every method runs on the bridge's loop thread."""

    def __init__(self, key: WorkerKey) -> None:
        self.key = key
        self._process: asyncio.subprocess.Process | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self.listing: dict[str, Any] | None = None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> dict[str, Any]:
        """Start the process (once) and return its ``load`` answer: tasks and tools."""
        async with self._start_lock:
            if self.listing is not None:
                return self.listing
            if not await asyncio.to_thread(os.path.exists, self.key.python):
                raise EnvironmentFailure(
                    f"no verifiers interpreter at {self.key.python}: run "
                    ".ci/verifiers_setup.sh, or pass --env-arg python=/path/to/venv/bin/python"
                )
            args = {"taskset": self.key.taskset, "kwargs": json.loads(self.key.kwargs_json),
                    "path": list(self.key.path), "score_timeout_s": self.key.score_timeout_s,
                    "disposable_child": disposable_child.PATH}
            self._process = await asyncio.create_subprocess_exec(
                self.key.python, str(_WORKER_SCRIPT), json.dumps(args),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=sys.stderr, limit=64 * 1024 * 1024,
            )
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[dict[str, Any]] = loop.create_future()
            self._waiting[0] = ready
            self._reader = asyncio.create_task(self._read())
            try:
                started = await asyncio.wait_for(ready, self.key.startup_timeout_s)
            except TimeoutError:
                await self.stop()
                raise EnvironmentFailure(
                    f"the verifiers worker for {self.key.taskset!r} did not start in "
                    f"{self.key.startup_timeout_s:.0f} s (startup_timeout_s=)"
                ) from None
            if started.get("error"):  # verifiers could not load the taskset: say why
                await self.stop()
                raise EnvironmentFailure(
                    f"verifiers could not load taskset {self.key.taskset!r}: "
                    f"{started['error'].get('message')}"
                )
            self.listing = await self.request("load")
            return self.listing

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        reason = "the verifiers worker exited"
        try:
            while line := await self._process.stdout.readline():
                reply = json.loads(line)
                future = self._waiting.pop(reply.get("id") or 0, None)
                if future is not None and not future.done():
                    future.set_result(reply)
        except (ValueError, asyncio.LimitOverrunError) as exc:
            reason = f"the verifiers worker sent an unreadable reply ({exc})"
        finally:
            code = await self._process.wait() if reason.endswith("exited") else None
            if code is not None:
                reason = f"{reason} (status {code})"
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(SandboxError(reason))
            self._waiting.clear()

    async def request(self, method: str, **params: Any) -> dict[str, Any]:
        """One request; a ``tool`` error is the model's (:class:`WorkerError`), a judge's
        failure a :class:`JudgeError` (the rollout masks the episode ``judge_error`` and
        does not run it again), every other error the environment's
        (:class:`EnvironmentFailure`), and a lost worker a :class:`SandboxError`, which the
        session lets through even from a tool call: the episode is masked, never scored."""
        if not self.alive or self._process is None or self._process.stdin is None:
            raise SandboxError("the verifiers worker is not running")
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        line = json.dumps({"id": request_id, "method": method, "params": params},
                          ensure_ascii=True)
        try:
            self._process.stdin.write(line.encode() + b"\n")
            await self._process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            self._waiting.pop(request_id, None)
            raise SandboxError("the verifiers worker closed its input") from None
        reply = await future
        error = reply.get("error")
        if error is None:
            return dict(reply["result"])
        if error.get("kind") == "tool":
            raise WorkerError(str(error.get("message")))
        if error.get("kind") == "judge":
            raise JudgeError(f"verifiers judge failed: {error.get('message')}")
        raise EnvironmentFailure(f"verifiers {error.get('kind')} error: {error.get('message')}")

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


_loop_lock = threading.Lock()
_loop: LoopThread | None = None
_workers: dict[WorkerKey, Worker] = {}


def bridge_loop() -> LoopThread:
    """The loop thread every worker of this process lives on (started on use): sessions
    run on many loops (one per sync session, a server's), a subprocess's pipes on one."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = LoopThread("envhub-verifiers")
        return _loop


async def worker_for(key: WorkerKey) -> Worker:
    """The running worker for ``key``, started on first use or after it died. Runs on
    :func:`bridge_loop`."""
    worker = _workers.get(key)
    if worker is None or (worker.listing is not None and not worker.alive):
        if worker is not None:
            await worker.stop()
        worker = _workers[key] = Worker(key)
    try:
        await worker.start()
    except BaseException:
        if _workers.get(key) is worker:
            del _workers[key]
        await worker.stop()
        raise
    return worker


async def stop_workers() -> None:
    """Stop every worker of this process (``aclose_shared``)."""
    for key in list(_workers):
        await _workers.pop(key).stop()

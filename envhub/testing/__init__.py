"""Helpers for plugin and integration tests: contract checks and a real server in a thread.

``call_tool``: one turn with one tool call, for tool tests. ``replay_calls``: an episode
of scripted calls through the rollout engine, for hostile-action tests.
``check_hostile_answers``: the shared hostile-answer corpus (:mod:`envhub.testing.hostile`) through
an environment, each answer scored as a plain wrong one.
``check_environment``: for every selected task, replaying the gold actions must score 1 and
doing nothing must score 0 (:mod:`envhub.rollout.check` runs both through the rollout
engine). ``serve_in_thread``: uvicorn on 127.0.0.1 for tests that need real HTTP;
``serve_in_subprocess``: ``envhub serve`` in its own process; ``free_port`` and
``wait_for_http`` for tests that start a server of their own.
``first_uses_at_once``: the cold-cache race, from threads and processes at the same moment.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envhub._util.asgi import ServerThread
from envhub._util.net import free_port, wait_for_http
from envhub.clients.local import make
from envhub.policies.reference import ReferencePolicy
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.rollout.check import CheckFailure, CheckReport, check_tasks
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.task import GoldCall
from envhub.testing.conformance import ConformanceReport as ConformanceReport
from envhub.testing.conformance import check_client_conformance as check_client_conformance
from envhub.testing.hostile import HOSTILE_ANSWERS, hostile_answers
from envhub.trajectory import Trajectory
from envhub.types import StepResult, ToolCall

__all__ = [
    "CheckFailure",
    "CheckReport",
    "ConformanceReport",
    "call_tool",
    "check_client_conformance",
    "check_environment",
    "check_hostile_answers",
    "check_tasks",
    "first_uses_at_once",
    "free_port",
    "replay_calls",
    "serve_in_subprocess",
    "serve_in_thread",
    "wait_for_http",
]


def check_environment(
    env: str | EnvironmentClient,
    *,
    task_ids: Iterable[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    concurrency: int = 1,
    **options: Any,
) -> CheckReport:
    """Blocking check for tests: raises ``AssertionError`` listing the failing tasks.

    ``env`` is a plugin name (made in-process with ``options``) or an environment client
    whose transport gives whole tasks (the reference policy replays their gold actions).
    """
    client = make(env, **options) if isinstance(env, str) else env

    async def check() -> CheckReport:
        try:
            ids = list(task_ids) if task_ids is not None else await client.task_ids(split)
            return await check_tasks(client, ids[:limit], concurrency=concurrency)
        finally:
            if isinstance(env, str):  # made here: release its shared resources too
                await client.aclose()

    report = asyncio.run(check())
    if not report.ok:
        lines = "\n".join(
            f"  {f.task_id} [{f.policy}] reward={f.reward} expected={f.expected} {f.detail}"
            for f in report.failures[:20]
        )
        raise AssertionError(f"{len(report.failures)} check failure(s) in {report.env}:\n{lines}")
    return report


@contextmanager
def serve_in_thread(app: Any, *, startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve an ASGI app with a real uvicorn server on 127.0.0.1 (a free port) in a thread.

    Yields the base URL; the server shuts down (lifespan included) on exit. For tests and
    benchmarks that need a real HTTP server without a subprocess.
    """
    server = ServerThread(app).start(startup_timeout_s)
    try:
        yield server.url
    finally:
        server.stop(startup_timeout_s)


@contextmanager
def serve_in_subprocess(
    *args: str, token: str = "", startup_timeout_s: float = 120.0
) -> Iterator[str]:
    """``envhub serve ARGS`` as a subprocess (the CLI, not the app factory, with
    ``ENVHUB_TOKEN=token``) on a free port of 127.0.0.1; yields its URL once ``/health``
    answers, and stops it on exit. A server of its own process is what a test needs when
    what it measures is the server's own event loop: one in a thread of the test's
    process shares the test's GIL. Raises ``RuntimeError`` with the server's output if it
    does not come up within ``startup_timeout_s``."""
    port = free_port()
    command = [sys.executable, "-m", "envhub.cli", "serve", *args, "--port", str(port),
               "--log-level", "warning"]  # fmt: skip
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ENVHUB_TOKEN": token},
        )
        url = f"http://127.0.0.1:{port}"
        try:
            if not wait_for_http(f"{url}/health", timeout_s=startup_timeout_s,
                                 gone=lambda: proc.poll() is not None):  # fmt: skip
                output.seek(0)
                said = output.read().decode(errors="replace")[-4000:]
                raise RuntimeError(f"envhub serve {' '.join(args)} did not come up:\n{said}")
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=60)


async def call_tool(session: SessionHandle, tool: str, /, **arguments: Any) -> StepResult:
    """``await call_tool(session, "run_sql", query=...)``: one turn with one tool call."""
    call = ToolCall(id=f"call-{uuid.uuid4().hex[:12]}", name=tool, arguments=arguments)
    return await session.step([call])


async def replay_calls(
    env: EnvironmentClient,
    task_id: str,
    calls: Iterable[GoldCall],
    *,
    max_env_attempts: int = 3,
) -> Trajectory:
    """One episode of ``task_id`` through the rollout engine, its policy making ``calls``
    (one per turn; then the task's answer as a final message if the episode still runs).

    For hostile-action tests: with episode retries on, as ``envhub rollout`` runs them,
    an action an environment wrongly turns into an infrastructure failure shows as a
    masked trajectory or ``metrics.episode_attempts > 1`` instead of a scored episode.
    """
    task = (await env.task(task_id)).model_copy(update={"gold_actions": list(calls)})
    runner = EpisodeRunner(
        env,
        ReferencePolicy(),
        max_env_attempts=max_env_attempts,
        task_of=lambda _: task,
    )
    return await runner.run(EpisodeSpec(task_id=task_id, sample_index=0, group_id="replay"))


async def check_hostile_answers(
    env: EnvironmentClient,
    task_id: str,
    answer_calls: Callable[[str], list[GoldCall]],
    *,
    plain_wrong: str = "0",
    answers: Iterable[str] | None = None,
    concurrency: int = 1,
) -> None:
    """Every hostile answer (default: :data:`envhub.testing.hostile.HOSTILE_ANSWERS`; ``{marker}``
    in any of them names a marker file of that answer's own) through ``replay_calls``,
    ``answer_calls(text)`` making the episode's calls: each episode is scored (not masked,
    one attempt) with the reward ``plain_wrong`` gets, no marker file appears on this
    machine, and a clean wrong and a clean gold episode scored after the corpus get the
    rewards they got before it (no episode influences another's reward). With
    ``concurrency`` > 1 the corpus runs that many episodes at a time, as a rollout would:
    hostile episodes in flight together must not touch each other's scores either. An
    environment that waits (a browser, a sandbox) is then checked in less time for the
    same CPU (web: 57 s against 71 s, 102 against 108 CPU-s); one whose episodes compute
    (Reasoning Gym's scoring workers) spends twice the CPU, so the default is one.
    Raises ``AssertionError`` listing every answer that did not hold."""
    task = await env.task(task_id)
    with tempfile.TemporaryDirectory(prefix="envhub-hostile-") as folder:

        async def reward_of(calls: list[GoldCall]) -> float | None:
            trajectory = await replay_calls(env, task_id, calls)
            if trajectory.masked or trajectory.metrics.episode_attempts != 1:
                return None
            return trajectory.reward

        clean = [answer_calls(plain_wrong), list(task.gold_actions)]
        before = [await reward_of(calls) for calls in clean]
        assert before[0] is not None, f"the plain wrong answer {plain_wrong!r} was masked"
        raw = list(HOSTILE_ANSWERS if answers is None else answers)
        markers = [Path(folder) / f"ran-on-the-host-{i}" for i in range(len(raw))]
        texts = [hostile_answers(str(m), [r])[0] for m, r in zip(markers, raw, strict=True)]
        limit = asyncio.Semaphore(concurrency)

        async def limited(text: str) -> float | None:
            async with limit:
                return await reward_of(answer_calls(text))

        rewards = await asyncio.gather(*(limited(text) for text in texts))
        failures = []
        for text, marker, reward in zip(texts, markers, rewards, strict=True):
            if reward != before[0]:
                failures.append(f"{text[:80]!r}: reward {reward} (masked: None), "
                                f"a plain wrong answer gets {before[0]}")  # fmt: skip
            if marker.exists():
                failures.append(f"{text[:80]!r}: wrote {marker} on the host")
        after = [await reward_of(calls) for calls in clean]
        if after != before:
            failures.append(f"clean episodes after the corpus scored {after}, before {before}")
    if failures:
        raise AssertionError(f"{len(failures)} hostile answer(s) did not hold:\n"
                             + "\n".join(failures))  # fmt: skip


#: runs a test's script in a fresh interpreter: set up, say ready, wait for go, first_use()
_FIRST_USE_RUNNER = """
import pathlib, sys, time
script, ready, go = map(pathlib.Path, sys.argv[1:4])
exec(compile(script.read_text(), str(script), "exec"))
ready.touch()
while not go.exists():
    time.sleep(0.005)
first_use()
"""


def first_uses_at_once(
    first_use: Callable[[], object],
    script: str,
    *,
    threads: int = 4,
    processes: int = 3,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
) -> None:
    """Start ``threads`` calls of ``first_use`` in this process and ``processes`` fresh
    interpreters running ``script`` (Python source that defines ``first_use()``; its
    imports run before the start), all released at the same moment.

    This is how two episodes on a fresh machine meet a cold cache. Raises
    ``AssertionError`` with every thread's traceback and every failed process's output.
    """
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="envhub-first-use-") as tmp:
        folder = Path(tmp)
        (folder / "script.py").write_text(script, "utf-8")
        go = folder / "go"
        procs = []
        for i in range(processes):
            with open(folder / f"out{i}", "w") as out:
                argv = [sys.executable, "-c", _FIRST_USE_RUNNER, str(folder / "script.py"),
                        str(folder / f"ready{i}"), str(go)]  # fmt: skip
                procs.append(subprocess.Popen(argv, env={**os.environ, **(env or {})},
                                              stdout=out, stderr=subprocess.STDOUT))  # fmt: skip
        try:
            deadline = time.monotonic() + timeout_s
            while not all((folder / f"ready{i}").exists() or p.poll() is not None
                          for i, p in enumerate(procs)):  # fmt: skip
                if time.monotonic() > deadline:
                    raise AssertionError("the first-use processes did not get ready in time")
                time.sleep(0.01)
            barrier = threading.Barrier(threads + 1)

            def run() -> None:
                barrier.wait()
                try:
                    first_use()
                except BaseException:
                    failures.append(f"thread: {traceback.format_exc()}")

            workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
            for worker in workers:
                worker.start()
            go.touch()
            barrier.wait()
            for worker in workers:
                worker.join(max(deadline - time.monotonic(), 0))
                if worker.is_alive():
                    failures.append("thread: still running at the deadline")
            for i, proc in enumerate(procs):
                try:
                    proc.wait(max(deadline - time.monotonic(), 0))
                except subprocess.TimeoutExpired:
                    failures.append(f"process {i}: still running at the deadline")
                    continue
                if proc.returncode != 0:
                    output = (folder / f"out{i}").read_text(errors="replace")[-4000:]
                    failures.append(f"process {i} exited {proc.returncode}:\n{output}")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    if failures:
        raise AssertionError(f"{len(failures)} first use(s) failed:\n" + "\n".join(failures))

"""Benchmark plumbing shared by the envhub and OpenEnv throughput runs: standard library only.

C workers loop episodes of open + N steps + close against any transport, given as an
``open_session(task_id)`` coroutine returning an object with ``step(tool_calls)`` and
``close()``. Only the step round trips are timed, so the same loop measures envhub's HTTP
server here and OpenEnv's WebSocket server from OpenEnv's own virtual environment
(``openenv_calc.py``), which cannot import envhub.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

CALL = [{"id": "c1", "name": "calculate", "arguments": '{"expression": "1+1"}'}]


@dataclass
class Run:
    steps: int = 0
    episodes: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    first_error: str = ""


OpenSession = Callable[[str], Awaitable[Any]]


async def _episodes(open_session: OpenSession, steps: int, deadline: float, run: Run,
                    index: int, call: list[dict[str, str]]) -> None:
    """One worker: episodes back to back until the deadline (at least one)."""
    while True:
        try:
            session = await open_session(f"calc-0-{index % 3000:05d}")
            for _ in range(steps):
                started = time.perf_counter()
                await session.step(call)
                run.latencies.append(time.perf_counter() - started)
                run.steps += 1
            await session.close()
            run.episodes += 1
        except Exception as exc:  # counted and reported; the run goes on
            run.errors += 1
            run.first_error = run.first_error or f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            return


async def drive(open_session: OpenSession, concurrency: int, steps: int,
                duration: float, call: list[dict[str, str]] = CALL) -> tuple[Run, float]:
    """``call`` is each step's tool calls (calc's ``calculate``, unless given)."""
    run = Run()
    started = time.perf_counter()
    deadline = time.monotonic() + duration
    await asyncio.gather(*(_episodes(open_session, steps, deadline, run, i, call)
                           for i in range(concurrency)))
    return run, time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (clock ticks)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_per_step(server_cpu: float, client_cpu: float, steps: int) -> str:
    """Server and client CPU per step: which side bounds throughput, even on a shared machine."""
    per_step = 1000 / max(steps, 1)
    server_ms, client_ms = server_cpu * per_step, client_cpu * per_step
    return (f"           CPU per step: server {server_ms:.3f} ms, client {client_ms:.3f} ms "
            f"(create/close included); ceiling with a free core each: "
            f"{1000 / max(server_ms, client_ms, 1e-9):.0f} steps/s")


def percentiles_ms(run: Run) -> tuple[float, float]:
    """p50 and p99 step latency in milliseconds (NaN when no step completed)."""
    lat = sorted(run.latencies) or [float("nan")]
    return statistics.median(lat) * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000


def report(label: str, concurrency: int, run: Run, elapsed: float, extra: str) -> float:
    rate = run.steps / elapsed
    p50, p99 = percentiles_ms(run)
    print(f"{label:<10} C={concurrency:<5} steps/s={rate:8.0f}  p50={p50:7.1f} ms  "
          f"p99={p99:7.1f} ms  episodes={run.episodes:<6} errors={run.errors:<4} {extra}",
          flush=True)
    if run.first_error:
        print(f"           first error: {run.first_error}", flush=True)
    return rate

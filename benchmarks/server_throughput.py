"""Throughput of ``envhub serve`` driven by ``RemoteEnvironment``.

A one-worker uvicorn server hosting ``calc`` runs in a subprocess (``envhub serve``);
this process drives C concurrent sessions, each looping episodes of create + N steps
(``calculate "1+1"``) + close until the duration is spent. For each C it prints
steps/s, p50/p99 step latency, errors and the server's peak RSS, then two ratios:

* against 2,200 steps/s, OpenEnv 0.10's figure at C=256 over its WebSocket transport
  with one uvicorn worker (a published number, not re-measured here);
* against the same episodes run in-process through ``LocalEnvironment`` in this run,
  which shows what the HTTP transport costs.

    python benchmarks/server_throughput.py --concurrency 64 256 1024 4096 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

import envhub
from envhub.cli.serve import raise_open_files_limit
from envhub.client import RemoteEnvironment

OPENENV_STEPS_PER_S = 2200.0
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
                    index: int) -> None:
    """One worker: episodes back to back until the deadline (at least one)."""
    while True:
        try:
            session = await open_session(f"calc-0-{index % 3000:05d}")
            for _ in range(steps):
                started = time.perf_counter()
                await session.step(CALL)
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
                duration: float) -> tuple[Run, float]:
    run = Run()
    started = time.perf_counter()
    deadline = time.monotonic() + duration
    await asyncio.gather(*(_episodes(open_session, steps, deadline, run, i)
                           for i in range(concurrency)))
    return run, time.perf_counter() - started


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, max_turns: int, max_sessions: int) -> subprocess.Popen[bytes]:
    cli = "import envhub.cli.serve; from envhub.cli._app import app; app()"
    command = [sys.executable, "-c", cli,
               "serve", "calc", "--port", str(port), "--max-turns", str(max_turns),
               # a loaded machine must not end episodes by calc's 120 s wall clock
               "--episode-timeout", "86400",
               "--max-sessions", str(max_sessions), "--log-level", "warning"]
    proc = subprocess.Popen(command, env={**os.environ, "ENVHUB_TOKEN": ""})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start")


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


def report(label: str, concurrency: int, run: Run, elapsed: float, extra: str) -> float:
    rate = run.steps / elapsed
    lat = sorted(run.latencies) or [float("nan")]
    p50 = statistics.median(lat) * 1000
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    print(f"{label:<10} C={concurrency:<5} steps/s={rate:8.0f}  p50={p50:7.1f} ms  "
          f"p99={p99:7.1f} ms  episodes={run.episodes:<6} errors={run.errors:<4} {extra}",
          flush=True)
    if run.first_error:
        print(f"           first error: {run.first_error}", flush=True)
    return rate


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    parser.add_argument("--skip-local", action="store_true", help="skip the in-process baseline")
    args = parser.parse_args()

    raise_open_files_limit()
    load = os.getloadavg()[0]
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs (the figures share the machine); "
          f"client loop: {loop}", flush=True)
    top = max(args.concurrency)
    port = _free_port()
    server = start_server(port, max_turns=args.steps + 2, max_sessions=top)
    remote = RemoteEnvironment(f"http://127.0.0.1:{port}", "calc", max_connections=top,
                               timeout=300.0)
    local = envhub.make("calc", max_turns=args.steps + 2)
    try:
        for c in args.concurrency:
            server_cpu, client_cpu = cpu_seconds(server.pid), time.process_time()
            run, elapsed = await drive(remote.open, c, args.steps, args.duration)
            server_cpu = cpu_seconds(server.pid) - server_cpu
            client_cpu = time.process_time() - client_cpu
            rss = f"server peak RSS={peak_rss_mib(server.pid):.0f} MiB"
            rate = report("http", c, run, elapsed, rss)
            # CPU per step tells which side bounds throughput, even on a shared machine.
            per_step = 1000 / max(run.steps, 1)
            server_ms, client_ms = server_cpu * per_step, client_cpu * per_step
            print(f"           CPU per step: server {server_ms:.3f} ms, client {client_ms:.3f} ms "
                  f"(create/close included); ceiling with a free core each: "
                  f"{1000 / max(server_ms, client_ms, 1e-9):.0f} steps/s")
            print(f"           ratio to OpenEnv's 2,200 steps/s: {rate / OPENENV_STEPS_PER_S:.2f}")
            if not args.skip_local:
                run, elapsed = await drive(local.open, c, args.steps, args.duration)
                local_rate = report("in-process", c, run, elapsed, "")
                print(f"           ratio http / in-process: {rate / local_rate:.2f}")
    finally:
        await remote.aclose()
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    # The driver runs on uvloop when installed, as a rollout process should: the stock
    # asyncio loop costs the client about a third more CPU per request.
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())

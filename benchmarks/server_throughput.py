"""Throughput of ``envhub serve`` driven by ``RemoteEnvironment``.

A one-worker uvicorn server hosting ``calc`` runs in a subprocess (``envhub serve``);
this process drives C concurrent sessions, each looping episodes of create + N steps
(``calculate "1+1"``) + close until the duration is spent. For each C it prints
steps/s, p50/p99 step latency, errors and the server's peak RSS, then two ratios:

* against 2,200 steps/s, OpenEnv 0.10's figure at C=256 over its WebSocket transport
  with one uvicorn worker (the issue's figure; ``openenv_baseline.py`` measures OpenEnv
  side by side on this machine);
* against the same episodes run in-process through ``LocalEnvironment`` in this run,
  which shows what the HTTP transport costs.

    python benchmarks/server_throughput.py --concurrency 64 256 1024 4096 --duration 10
    python benchmarks/server_throughput.py --concurrency 256 4096 --transport ws
    python benchmarks/server_throughput.py --concurrency 256 4096 --transport ws --gc-threshold 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator

from _load import cpu_per_step, cpu_seconds, drive, peak_rss_mib, report

import envhub
from envhub._util.gc_tuning import DEFAULT_GC_THRESHOLD
from envhub._util.net import free_port, wait_for_http
from envhub.clients.remote import RemoteEnvironment, SessionTransport
from envhub.rollout.runtime import run_async
from envhub.server import raise_open_files_limit

OPENENV_STEPS_PER_S = 2200.0


def start_server(port: int, max_turns: int, max_sessions: int,
                 gc_threshold: int = DEFAULT_GC_THRESHOLD) -> subprocess.Popen[bytes]:
    cli = "import envhub.cli.serve; from envhub.cli._app import app; app()"
    command = [sys.executable, "-c", cli,
               "serve", "calc", "--port", str(port), "--max-turns", str(max_turns),
               # a loaded machine must not end episodes by calc's 120 s wall clock
               "--episode-timeout", "86400",
               "--max-sessions", str(max_sessions), "--log-level", "warning",
               "--gc-threshold", str(gc_threshold)]
    proc = subprocess.Popen(command, env={**os.environ, "ENVHUB_TOKEN": ""})
    return wait_healthy(proc, f"http://127.0.0.1:{port}/health")


def wait_healthy(proc: subprocess.Popen[bytes], url: str) -> subprocess.Popen[bytes]:
    """Return ``proc`` once ``url`` answers 200; kill it and exit after 60 s."""
    if wait_for_http(url, timeout_s=60, gone=lambda: proc.poll() is not None, interval_s=0.2):
        return proc
    proc.kill()
    raise SystemExit(f"server did not start: {proc.args}")


@contextlib.asynccontextmanager
async def serving(steps: int, max_sessions: int, transport: SessionTransport = "http",
                  gc_threshold: int = DEFAULT_GC_THRESHOLD,
                  ) -> AsyncIterator[tuple[RemoteEnvironment, subprocess.Popen[bytes]]]:
    """``envhub serve calc`` in a subprocess and a client sized for ``max_sessions``,
    stepping over ``transport`` (HTTP requests, or pooled WebSockets: ``/v1/ws``)."""
    port = free_port()
    server = start_server(port, max_turns=steps + 2, max_sessions=max_sessions,
                          gc_threshold=gc_threshold)
    remote = RemoteEnvironment(f"http://127.0.0.1:{port}", "calc",
                               max_connections=max_sessions, timeout=300.0,
                               transport=transport)
    try:
        yield remote, server
    finally:
        await remote.aclose()
        server.terminate()
        server.wait(timeout=30)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    parser.add_argument("--transport", choices=["http", "ws"], default="http",
                        help="step over HTTP requests or pooled WebSockets (/v1/ws)")
    parser.add_argument("--skip-local", action="store_true", help="skip the in-process baseline")
    parser.add_argument("--gc-threshold", type=int, default=DEFAULT_GC_THRESHOLD,
                        help="the server's --gc-threshold (0: Python's default collector)")
    args = parser.parse_args()

    raise_open_files_limit()
    load = os.getloadavg()[0]
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs (the figures share the machine); "
          f"client loop: {loop}", flush=True)
    local = envhub.make("calc", max_turns=args.steps + 2)
    async with serving(args.steps, max(args.concurrency), args.transport,
                       args.gc_threshold) as (remote, server):
        for c in args.concurrency:
            server_cpu, client_cpu = cpu_seconds(server.pid), time.process_time()
            run, elapsed = await drive(remote.open, c, args.steps, args.duration)
            server_cpu = cpu_seconds(server.pid) - server_cpu
            client_cpu = time.process_time() - client_cpu
            rss = f"server peak RSS={peak_rss_mib(server.pid):.0f} MiB"
            rate = report(args.transport, c, run, elapsed, rss)
            print(cpu_per_step(server_cpu, client_cpu, run.steps))
            print(f"           ratio to OpenEnv's 2,200 steps/s: {rate / OPENENV_STEPS_PER_S:.2f}")
            if not args.skip_local:
                run, elapsed = await drive(local.open, c, args.steps, args.duration)
                local_rate = report("in-process", c, run, elapsed, "")
                print(f"           ratio {args.transport} / in-process: {rate / local_rate:.2f}")


if __name__ == "__main__":
    run_async(main())  # uvloop when installed, as `envhub rollout` runs (less CPU per request)

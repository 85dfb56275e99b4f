"""OpenEnv measured on this machine, on the workload of ``server_throughput.py``.

OpenEnv (``openenv`` from PyPI) is installed in its own venv so that it cannot disturb
envhub's dependencies:

    python3 -m venv .venv-openenv && .venv-openenv/bin/pip install openenv uvloop httptools

(uvloop and httptools are what envhub's venv runs uvicorn and its driver on, so both sides
get the same event loop and HTTP parser.) From that venv, ``openenv_calc.py`` runs a
one-worker uvicorn server hosting calc's ``calculate`` as an OpenEnv environment
(``max_concurrent_envs`` = the largest C; ``step_async`` on the event loop as envhub runs
calc's async tools, or with ``--threaded-env`` sync ``step`` in a thread per session as
OpenEnv's template writes it) and, per C, a driver process in which C
OpenEnv ``EnvClient`` sessions loop over WebSocket: connect + reset, N steps
(``expression="1+1"``), close, timed by the same loop envhub's benchmark uses
(``_load.drive``). With ``--envhub``, envhub's HTTP server is measured at the same C in
this run (``server_throughput.serving``, over each ``--transport``: HTTP requests and/or a
WebSocket per session) and the ratio envhub / OpenEnv is printed.

    .venv/bin/python benchmarks/openenv_baseline.py --concurrency 64 256 --duration 8 --envhub
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from _load import Run, cpu_per_step, cpu_seconds, drive, peak_rss_mib, report
from server_throughput import serving, wait_healthy

from envhub._util.net import free_port
from envhub.clients.remote import SessionTransport
from envhub.rollout.runtime import run_async
from envhub.server import raise_open_files_limit

HERE = Path(__file__).resolve().parent
OPENENV_SCRIPT = HERE / "openenv_calc.py"
DEFAULT_PYTHON = HERE.parent / ".venv-openenv" / "bin" / "python"


def openenv_version(python: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('openenv'))"
    return subprocess.run([str(python), "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip()


@contextlib.contextmanager
def openenv_server(python: Path, max_sessions: int, threaded: bool) -> Iterator[tuple[str, int]]:
    """The OpenEnv server in a subprocess; yields its URL and pid."""
    port = free_port()
    proc = subprocess.Popen([str(python), str(OPENENV_SCRIPT), "serve", "--port", str(port),
                             "--max-sessions", str(max_sessions)]
                            + (["--threaded"] if threaded else []))
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}/health")
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def drive_openenv(python: Path, url: str, concurrency: int, steps: int,
                        duration: float) -> tuple[Run, float, float]:
    """One driver process at C; returns its run, elapsed seconds and its CPU seconds."""
    proc = await asyncio.create_subprocess_exec(
        str(python), str(OPENENV_SCRIPT), "drive", "--url", url,
        "--concurrency", str(concurrency), "--steps", str(steps), "--duration", str(duration),
        stdout=asyncio.subprocess.PIPE)
    stdout, _ = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"OpenEnv driver exited with {proc.returncode}")
    result = json.loads(stdout.decode().strip().splitlines()[-1])
    return Run(**result["run"]), result["elapsed"], result["client_cpu"]


async def measure_envhub(concurrency: int, steps: int, duration: float,
                         max_sessions: int, transport: SessionTransport) -> float:
    async with serving(steps, max_sessions, transport) as (remote, server):
        server_cpu, client_cpu = cpu_seconds(server.pid), time.process_time()
        run, elapsed = await drive(remote.open, concurrency, steps, duration)
        server_cpu = cpu_seconds(server.pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
        rate = report(f"envhub-{transport}", concurrency, run, elapsed,
                      f"server peak RSS={peak_rss_mib(server.pid):.0f} MiB")
        print(cpu_per_step(server_cpu, client_cpu, run.steps))
    return rate


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per level")
    parser.add_argument("--envhub", action="store_true",
                        help="also measure envhub's server at each C and print the ratio")
    parser.add_argument("--transport", choices=["http", "ws"], nargs="+", default=["http"],
                        help="envhub's session transports to measure (each in this run)")
    parser.add_argument("--threaded-env", action="store_true",
                        help="host OpenEnv's env with sync reset/step in a thread per session "
                             "(its template's style) instead of async on the event loop")
    parser.add_argument("--openenv-python", type=Path, default=DEFAULT_PYTHON,
                        help="python of the venv where openenv is installed")
    args = parser.parse_args()
    if not args.openenv_python.exists():
        raise SystemExit(f"{args.openenv_python} not found; create the OpenEnv venv first "
                         "(see the docstring: --help)")

    raise_open_files_limit()  # inherited by the OpenEnv server and drivers
    top = max(args.concurrency)
    print(f"openenv {openenv_version(args.openenv_python)}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (the figures share the machine)",
          flush=True)
    label = "openenv-th" if args.threaded_env else "openenv"
    for c in args.concurrency:
        with openenv_server(args.openenv_python, top, args.threaded_env) as (url, pid):
            server_cpu = cpu_seconds(pid)
            run, elapsed, client_cpu = await drive_openenv(args.openenv_python, url, c,
                                                           args.steps, args.duration)
            server_cpu = cpu_seconds(pid) - server_cpu
            rate = report(label, c, run, elapsed,
                          f"server peak RSS={peak_rss_mib(pid):.0f} MiB")
            print(cpu_per_step(server_cpu, client_cpu, run.steps))
        for transport in args.transport if args.envhub else ():
            envhub_rate = await measure_envhub(c, args.steps, args.duration, top, transport)
            print(f"           ratio envhub-{transport} / openenv: {envhub_rate / rate:.2f}",
                  flush=True)


if __name__ == "__main__":
    run_async(main())  # uvloop when installed, as `envhub rollout` runs (less CPU per request)

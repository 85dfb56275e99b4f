"""What one concurrent session costs a replica: the figures behind the capacity
model of docs/scaling.md.

Starts ``envhub serve ENV`` in a subprocess, opens ``--sessions`` sessions over HTTP,
steps each ``--steps`` times with a cheap tool call, and prints:

- server RSS per open session (MiB), against the idle server measured in the same run;
- server CPU per step (ms: user + system of the server and its children, over the steps);
- for environments whose sessions run Docker sandboxes (``swe``), the containers' memory
  per session (``docker stats``), the containerd shim's RSS per container, and the
  sandbox count (sessions plus the warm pool).

    python benchmarks/capacity.py --env calc --sessions 1000
    python benchmarks/capacity.py --env sql --sessions 500
    python benchmarks/capacity.py --env swe --sessions 8 --steps 2   # Docker + SWE images

A sandbox's memory at rest is a floor: a test run inside it takes up to the sandbox's
memory limit (the SWE default is 2 GiB), which is what a cluster must be sized for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from typing import Any

import psutil

from envhub._util.net import free_port, wait_for_http
from envhub.clients.remote import RemoteEnvironment
from envhub.sandboxes.docker_cli import run_docker

CHEAP_CALLS: dict[str, dict[str, Any]] = {
    "calc": {"name": "calculate", "arguments": {"expression": "6*7"}},
    "sql": {"name": "list_tables", "arguments": {}},
    "search": {"name": "search", "arguments": {"query": "river"}},
    "swe": {"name": "bash", "arguments": {"command": "true"}},
}


def tree_rss_mib(process: psutil.Process) -> float:
    procs = [process, *process.children(recursive=True)]
    return sum(p.memory_info().rss for p in procs if p.is_running()) / 2**20


def tree_cpu_s(process: psutil.Process) -> float:
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        times = p.cpu_times()
        total += times.user + times.system + times.children_user + times.children_system
    return total


def shim_rss_mib() -> float:
    """RSS of the containerd shims: the host's own cost per running container."""
    return sum(
        p.info["memory_info"].rss
        for p in psutil.process_iter(["name", "memory_info"])
        if (p.info["name"] or "").startswith("containerd-shim") and p.info["memory_info"]
    ) / 2**20


def container_memory_mib() -> tuple[int, float]:
    """(containers, MiB in use inside them) of the envhub-labelled sandbox containers."""
    ids = run_docker("ps", "-q", "--filter", "label=envhub.sandbox").stdout.split()
    if not ids:
        return 0, 0.0
    out = run_docker("stats", "--no-stream", "--format", "{{json .}}", *ids, check=True).stdout
    total = 0.0
    units = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}
    for line in out.splitlines():
        used = json.loads(line)["MemUsage"].split("/")[0].strip()
        number = used.rstrip("KMGiB")
        total += float(number) * units[used[len(number):]]
    return len(ids), total


async def measure(url: str, env: str, sessions: int, steps: int, server: psutil.Process
                  ) -> dict[str, float]:
    remote = RemoteEnvironment(url, env, transport="http")
    try:
        ids = await remote.task_ids()
        idle = tree_rss_mib(server)
        opened = []
        for start in range(0, sessions, 64):  # open in waves: a replica's creates queue anyway
            batch = range(start, min(start + 64, sessions))
            opened += await asyncio.gather(*(remote.open(ids[i % len(ids)]) for i in batch))
        await asyncio.sleep(1.0)
        loaded = tree_rss_mib(server)
        containers, container_mib = container_memory_mib()
        shims = shim_rss_mib()
        call = CHEAP_CALLS[env]
        cpu_before = tree_cpu_s(server)
        for _ in range(steps):
            await asyncio.gather(*(s.step([call]) for s in opened))
        cpu = tree_cpu_s(server) - cpu_before
        await asyncio.gather(*(s.abort() for s in opened))
    finally:
        await remote.aclose()
    return {
        "idle_rss_mib": idle,
        "loaded_rss_mib": loaded,
        "rss_per_session_mib": (loaded - idle) / sessions,
        "cpu_ms_per_step": cpu / (sessions * steps) * 1e3,
        "containers": containers,
        "container_mib_per_session": container_mib / sessions,
        "shim_mib_per_container": shims / containers if containers else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="calc", choices=sorted(CHEAP_CALLS))
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--env-arg", action="append", default=[],
                        help="KEY=VALUE passed to envhub serve (the operator's options)")
    args = parser.parse_args()
    port = free_port()
    command = [sys.executable, "-m", "envhub.cli", "serve", args.env, "--port", str(port),
               "--max-sessions", str(max(4096, args.sessions)), "--log-level", "warning"]
    for pair in args.env_arg:
        command += ["--env-arg", pair]
    server = subprocess.Popen(command)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_for_http(f"{url}/health", timeout_s=120, interval_s=0.3,
                             gone=lambda: server.poll() is not None):  # fmt: skip
            raise SystemExit("the server did not start")
        figures = asyncio.run(
            measure(url, args.env, args.sessions, args.steps, psutil.Process(server.pid))
        )
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(f"{args.env}: {args.sessions} open sessions, {args.steps} steps each")
    print(f"  server RSS idle {figures['idle_rss_mib']:.0f} MiB -> "
          f"{figures['loaded_rss_mib']:.0f} MiB: {figures['rss_per_session_mib'] * 1024:.1f} KiB "
          "per session")
    print(f"  server CPU per step: {figures['cpu_ms_per_step']:.2f} ms")
    if figures["containers"]:
        print(f"  sandboxes: {figures['containers']:.0f} containers, "
              f"{figures['container_mib_per_session']:.1f} MiB per session at rest inside, "
              f"{figures['shim_mib_per_container']:.1f} MiB of containerd shim per container")


if __name__ == "__main__":
    main()

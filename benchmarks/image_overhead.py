"""Environment images: build time and size per environment, container start to healthy,
and calc steps/s through a container against the same server on the host, in one run.

For each ``--envs`` environment it builds the image (``--fresh`` removes that
environment's images and the shared runtime first, so the build starts from the
``python`` sandbox image; the host's wheel cache stays), prints build seconds and the
image's size, then times ``start_container`` from ``docker run`` to a healthy health
check. Then ``envhub serve calc`` on the host and calc's container (published on
127.0.0.1 through docker's userland proxy: dockerd runs with ``--iptables=false`` here)
each take the same C concurrent sessions of create + N steps (``calculate "1+1"``) +
close for ``--duration`` seconds, alternating, and the ratio container / host is printed.

    python benchmarks/image_overhead.py --envs calc sql search --fresh
    python benchmarks/image_overhead.py --envs calc --concurrency 64 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from _load import drive, report
from server_throughput import start_server

from envhub._util.net import free_port
from envhub.clients.remote import RemoteEnvironment
from envhub.environment_images import build_env_image
from envhub.environment_images.run import remove_images, start_container, stop_container
from envhub.rollout.runtime import run_async
from envhub.sandboxes.docker_cli import run_docker


def image_size_mb(tag: str) -> float:
    out = run_docker("image", "inspect", "-f", "{{.Size}}", tag, check=True).stdout
    return int(out) / 1e6


def build_and_start(env: str, fresh: bool) -> str:
    if fresh:
        remove_images(env)
    started = time.perf_counter()
    tag = build_env_image(env)
    built = time.perf_counter() - started
    started = time.perf_counter()
    container = start_container(tag)
    healthy = time.perf_counter() - started
    stop_container(container.id)
    print(f"{env:<8} build {built:6.1f} s  size {image_size_mb(tag):6.0f} MB  "
          f"start to healthy {healthy:4.1f} s  ({tag})", flush=True)
    return tag


async def steps_per_s(url: str, concurrency: int, steps: int, duration: float,
                      label: str) -> float:
    remote = RemoteEnvironment(url, "calc", max_connections=concurrency, timeout=300.0)
    try:
        run, elapsed = await drive(remote.open, concurrency, steps, duration)
    finally:
        await remote.aclose()
    return report(label, concurrency, run, elapsed, "")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", default=["calc", "sql", "search"])
    parser.add_argument("--fresh", action="store_true",
                        help="remove the images (and the shared runtime) before building")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=2, help="host/container alternations")
    args = parser.parse_args()

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    if args.fresh:
        remove_images(None, runtime=True)
    tags = {env: await asyncio.to_thread(build_and_start, env, False) for env in args.envs}
    calc = tags.get("calc") or await asyncio.to_thread(build_env_image, "calc")

    serve_args = ["--max-turns", str(args.steps + 2), "--episode-timeout", "86400",
                  "--max-sessions", str(4 * args.concurrency)]
    port = free_port()
    host = start_server(port, max_turns=args.steps + 2, max_sessions=4 * args.concurrency)
    container = await asyncio.to_thread(start_container, calc, args=serve_args)
    try:
        rates: dict[str, list[float]] = {"host": [], "container": []}
        for _ in range(args.rounds):
            rates["host"].append(await steps_per_s(
                f"http://127.0.0.1:{port}", args.concurrency, args.steps, args.duration, "host"))
            rates["container"].append(await steps_per_s(
                container.url, args.concurrency, args.steps, args.duration, "container"))
        best = {k: max(v) for k, v in rates.items()}
        print(f"calc steps/s, best of {args.rounds}: host {best['host']:.0f}, container "
              f"{best['container']:.0f}; ratio container / host "
              f"{best['container'] / best['host']:.2f}", flush=True)
    finally:
        stop_container(container.id)
        host.terminate()
        host.wait(timeout=30)


if __name__ == "__main__":
    run_async(main())

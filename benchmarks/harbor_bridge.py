"""What a terminal command costs through the Harbor bridge against ``docker exec``.

One episode of the shipped ``count-errors`` task (its image built once, cached); the
same command then runs, interleaved sample by sample, three ways on that container (a
new episode every 45 samples: an episode allows 50 commands):

- ``bridge``: a ``terminal`` tool call through an in-process envhub session (the
  session's step, the tool, envhub's Docker exec path as the agent's user, the
  observation), what a rollout pays per command;
- ``docker exec``: the ``docker exec -u 1000:1000 CONTAINER bash -c CMD`` CLI, what a
  harness that shells out pays (Terminal-Bench and Harbor's docker environment do);
- ``sdk exec_run``: the docker SDK's ``exec_run`` (one HTTP exchange set, no CLI process).

It prints p50/p90 per path and the bridge's p50 as a ratio of each baseline's.

    python benchmarks/harbor_bridge.py --samples 100 --command 'ls -la /app'

Needs Docker and envhub's ``python`` sandbox image (``envhub sandbox build python``).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time

from envhub_harbor import HarborEnv

import envhub
from envhub.sandboxes.docker import get_client
from envhub.sandboxes.docker_cli import docker_cli
from envhub.testing import call_tool


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def measure(
    env: envhub.LocalEnvironment, rounds: int, command: str, times: dict[str, list[float]]
) -> None:
    """``rounds`` interleaved samples of each path on one episode's container (an
    episode allows ``max_turns`` commands; its first command takes the container, the
    first 5 rounds warm up, not counted)."""
    session = await env.open("count-errors")
    try:
        await call_tool(session, "terminal", command="true")
        container = session.env.sb.container_id  # type: ignore[attr-defined]
        cli = [docker_cli(), "exec", "-u", "1000:1000", "-w", "/app", container,
               "bash", "-c", command]  # fmt: skip
        sdk = get_client().containers.get(container)
        for i in range(rounds + 5):
            t0 = time.perf_counter()
            step = await call_tool(session, "terminal", command=command)
            t1 = time.perf_counter()
            proc = await asyncio.to_thread(subprocess.run, cli, capture_output=True)
            t2 = time.perf_counter()
            code, _ = await asyncio.to_thread(sdk.exec_run, ["bash", "-c", command],
                                              user="1000:1000", workdir="/app")  # fmt: skip
            t3 = time.perf_counter()
            assert "[exit code 0]" in step.observations[0].content, step.observations[0].content
            assert proc.returncode == 0 and code == 0
            if i >= 5:
                times["bridge"].append(t1 - t0)
                times["docker exec"].append(t2 - t1)
                times["sdk exec_run"].append(t3 - t2)
    finally:
        await session.abort()


async def main(samples: int, command: str) -> None:
    env = envhub.make("harbor")
    times: dict[str, list[float]] = {"bridge": [], "docker exec": [], "sdk exec_run": []}
    per_episode = HarborEnv.budgets.max_turns - 6  # the first command and 5 warm-up rounds
    try:
        while len(times["bridge"]) < samples:
            await measure(env, min(per_episode, samples - len(times["bridge"])), command, times)
    finally:
        await env.aclose()
    print(f"{samples} samples of {command!r}, interleaved on each episode's container")
    for name, xs in times.items():
        print(f"  {name:13s} p50 {pct(xs, 0.5) * 1e3:7.1f} ms   p90 {pct(xs, 0.9) * 1e3:7.1f} ms")
    bridge = pct(times["bridge"], 0.5)
    for name in ("docker exec", "sdk exec_run"):
        print(f"  bridge / {name}: {bridge / pct(times[name], 0.5):.2f}x (p50)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--command", default="true")
    args = parser.parse_args()
    asyncio.run(main(args.samples, args.command))

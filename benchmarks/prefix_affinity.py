"""Prefix affinity: recomputed prompt tokens and episodes/s, sticky routing vs least-outstanding.

Workload: ``calc`` in-process, ``--turns``-turn episodes in GRPO groups, through
``envhub.rollout.run`` at concurrency 256 over four scripted model servers (separate
processes) that model an automatic prefix cache (``PrefixCache`` in
``tests/rollout/scripted_server.py``: 16-token blocks; the blocks of a served prompt and
completion are cached, so the next turn's prompt hits when it reaches the same server).
The samples of a group share their first prompt and then diverge (each reply carries a
random note, as sampling would differ). Each prompt token a server has not cached costs
``--us-per-token`` microseconds on top of ``--latency``, the stand-in for prefill; the
servers sleep rather than compute, so the model is latency, not contention. Every
routing runs on four fresh servers (empty caches) with the same episodes; the figures
are the servers' own counts.

    .venv/bin/python benchmarks/prefix_affinity.py [--tasks 256] [--group-size 4]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass

import httpx
from _scripted_model import load_note, run, scripted_server_process, server_root

import envhub
from envhub.policies import make_policy
from envhub.policies.endpoints import ROUTING_MODES, RoutingMode
from envhub.policies.transport import TransportOptions


@dataclass
class Outcome:
    routing: str
    episodes: int
    wall_s: float
    masked: int
    prompt_tokens: int
    recomputed_tokens: int
    requests: list[int]

    @property
    def hit_rate(self) -> float:
        return 1 - self.recomputed_tokens / max(self.prompt_tokens, 1)


async def rollout(
    urls: list[str], routing: RoutingMode, tasks: int, group_size: int
) -> tuple[float, int]:
    """(wall seconds, masked episodes) of one run."""
    env = envhub.make("calc")
    policy = make_policy(
        "openai", model="scripted", base_urls=urls, transport=TransportOptions(routing=routing)
    )
    task_ids = (await env.task_ids(None))[:tasks]
    started = time.perf_counter()
    try:
        result = await envhub.rollout.run(
            env, policy, task_ids, group_size=group_size, concurrency=256
        )
    finally:
        await policy.aclose()
    return time.perf_counter() - started, result.summary.masked


def measure(routing: RoutingMode, args: argparse.Namespace) -> Outcome:
    server_args = ["--latency", str(args.latency), "--prefix-cache-us-per-token",
                   str(args.us_per_token), "--calc-turns", str(args.turns),
                   "--distinct-samples"]  # fmt: skip
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(scripted_server_process(*server_args)) for _ in range(4)]
        urls = [server.base_url for server in servers]
        wall, masked = run(rollout(urls, routing, args.tasks, args.group_size))  # type: ignore[misc]
        stats = [httpx.get(f"{server_root(url)}/stats").json() for url in urls]
    caches = [s["prefix_cache"] for s in stats]
    return Outcome(
        routing=routing,
        episodes=args.tasks * args.group_size,
        wall_s=wall,
        masked=masked,
        prompt_tokens=sum(c["prompt_tokens"] for c in caches),
        recomputed_tokens=sum(c["recomputed_tokens"] for c in caches),
        requests=[s["requests"] for s in stats],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--turns", type=int, default=6, help="model turns per episode (calc: <= 8)")
    parser.add_argument("--latency", type=float, default=0.01, help="seconds per request")
    parser.add_argument("--us-per-token", type=float, default=50.0,
                        help="latency per recomputed prompt token (prefill stand-in)")  # fmt: skip
    args = parser.parse_args()
    print(
        f"calc, {args.turns}-turn episodes, {args.tasks} tasks x group {args.group_size}, "
        "concurrency 256, "
        f"4 prefix-cache servers ({args.latency * 1000:.0f} ms + {args.us_per_token:g} us per "
        f"recomputed prompt token); {load_note()}"
    )
    print(
        f"{'routing':<19}{'episodes/s':>11}{'masked':>8}{'prompt tok':>12}{'recomputed':>12}"
        f"{'hit rate':>10}  requests per server"
    )
    outcomes = {}
    for routing in ROUTING_MODES:
        outcome = outcomes[routing] = measure(routing, args)
        print(
            f"{routing:<19}{outcome.episodes / outcome.wall_s:>11.1f}{outcome.masked:>8}"
            f"{outcome.prompt_tokens:>12}{outcome.recomputed_tokens:>12}"
            f"{outcome.hit_rate:>10.1%}  {outcome.requests}"
        )
    balanced = outcomes["least-outstanding"]
    for routing in ("episode", "group"):
        sticky = outcomes[routing]
        ratio = balanced.recomputed_tokens / max(sticky.recomputed_tokens, 1)
        speedup = balanced.wall_s / sticky.wall_s
        verdict = "met" if ratio >= 2 else "NOT met"
        print(
            f"{routing}-sticky vs least-outstanding: {ratio:.2f}x fewer recomputed prompt "
            f"tokens (target >= 2x: {verdict}), {speedup:.2f}x episodes/s"
        )


if __name__ == "__main__":
    main()

"""Tree rollouts against flat GRPO groups of the same size: episodes/s, model requests,
recomputed prompt tokens and prefix-cache hit rates.

Workload: ``calc`` in-process, ``--turns``-turn episodes (the scripted model's calls),
``--tasks`` tasks, over ``--servers`` scripted model servers (separate processes) that
model an automatic prefix cache (``PrefixCache`` in ``tests/rollout/scripted_server.py``;
each reply carries a random note, so samples differ as sampling would make them). The
tree arm gives each task one tree, branching after every ``--branch-every`` turns
(``fixed:K``) into ``--factor`` continuations, ``--depth`` times: ``factor ** depth``
leaves, each a whole episode. The flat arm gives each task a group of as many episodes.
Each arm runs on fresh servers (empty caches) under sticky routing: ``group`` (every
request of a group, so of a tree, on one server) and ``episode`` (each episode on the
server its id hashes to: a tree's children are new episodes, so they land elsewhere).
The figures are the servers' own counts.

A tree's episodes share their turns up to each branch point, so it asks the model for
fewer turns per episode: ``(nodes * K) / leaves`` segments' turns instead of ``turns``.
The hit rate "at branch turns" counts the requests right after a branch point (turns K,
2K, ...): in a tree, the parent's continuation and its forks, whose prompt is the
parent's conversation; in a flat group, the members at the same turns. The ratios are
against the flat arm of the same routing, run in the same process.

    .venv/bin/python benchmarks/tree_rollout.py [--tasks 64] [--servers 2]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import httpx
from _scripted_model import load_note, run, scripted_server_process, server_root

import envhub
from envhub.policies import make_policy
from envhub.policies.endpoints import RoutingMode
from envhub.policies.transport import TransportOptions
from envhub.rollout.tree import TreeConfig, make_branch_rule


@dataclass
class Outcome:
    episodes: int
    masked: int
    wall_s: float
    requests: int
    prompt_tokens: int
    recomputed_tokens: int
    branch_prompt: int  # prompt tokens of the requests at branch turns
    branch_cached: int

    @property
    def rate(self) -> float:
        return self.episodes / self.wall_s

    @property
    def hit_rate(self) -> float:
        return 1 - self.recomputed_tokens / max(self.prompt_tokens, 1)

    @property
    def branch_hit_rate(self) -> float:
        return self.branch_cached / max(self.branch_prompt, 1)


async def rollout(
    urls: list[str], routing: RoutingMode, args: argparse.Namespace, tree: TreeConfig | None
) -> tuple[float, int, int]:
    """(wall seconds, episodes, masked episodes) of one arm."""
    env = envhub.make("calc")
    policy = make_policy(
        "openai", model="scripted", base_urls=urls, transport=TransportOptions(routing=routing)
    )
    task_ids = (await env.task_ids(None))[: args.tasks]
    leaves = args.factor**args.depth
    started = time.perf_counter()
    try:
        if tree is None:
            result = await envhub.rollout.run(env, policy, task_ids, group_size=leaves,
                                              concurrency=args.concurrency)  # fmt: skip
        else:  # trees in flight: as many episodes as the flat arm's at most
            trees = max(1, args.concurrency // leaves)
            result = await envhub.rollout.run(env, policy, task_ids, tree=tree,
                                              concurrency=trees)  # fmt: skip
    finally:
        await policy.aclose()
    summary = result.summary
    return time.perf_counter() - started, summary.episodes, summary.masked


def measure(routing: RoutingMode, args: argparse.Namespace, tree: TreeConfig | None) -> Outcome:
    server_args = ["--latency", str(args.latency), "--prefix-cache-us-per-token",
                   str(args.us_per_token), "--calc-turns", str(args.turns),
                   "--distinct-samples"]  # fmt: skip
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(scripted_server_process(*server_args))
                   for _ in range(args.servers)]  # fmt: skip
        urls = [server.base_url for server in servers]
        wall, episodes, masked = run(rollout(urls, routing, args, tree))  # type: ignore[misc]
        stats = [httpx.get(f"{server_root(url)}/stats").json() for url in urls]
    caches: list[dict[str, Any]] = [s["prefix_cache"] for s in stats]
    branch_turns = {str(args.branch_every * j) for j in range(1, args.depth + 1)}
    at_branches = [c["by_turn"][t] for c in caches for t in branch_turns if t in c["by_turn"]]
    return Outcome(
        episodes=episodes,
        masked=masked,
        wall_s=wall,
        requests=sum(s["requests"] for s in stats),
        prompt_tokens=sum(c["prompt_tokens"] for c in caches),
        recomputed_tokens=sum(c["recomputed_tokens"] for c in caches),
        branch_prompt=sum(p for p, _ in at_branches),
        branch_cached=sum(c for _, c in at_branches),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--turns", type=int, default=6, help="model turns per episode (calc: <= 8)")
    parser.add_argument("--branch-every", type=int, default=2, help="fixed:K")
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=256, help="episodes in flight")
    parser.add_argument("--latency", type=float, default=0.01, help="seconds per request")
    parser.add_argument("--us-per-token", type=float, default=50.0,
                        help="latency per recomputed prompt token (prefill stand-in)")  # fmt: skip
    args = parser.parse_args()
    if args.branch_every * args.depth >= args.turns:
        parser.error("episodes must outlast the branch points: --branch-every x --depth < --turns")
    leaves = args.factor**args.depth
    tree = TreeConfig(make_branch_rule(f"fixed:{args.branch_every}"), factor=args.factor,
                      depth=args.depth)  # fmt: skip
    print(
        f"calc, {args.turns}-turn episodes, {args.tasks} tasks: trees (fixed:{args.branch_every}, "
        f"factor {args.factor}, depth {args.depth}: {leaves} leaves) vs flat groups of "
        f"{leaves}; {args.concurrency} episodes in flight; {args.servers} prefix-cache servers "
        f"({args.latency * 1000:.0f} ms + {args.us_per_token:g} us per recomputed prompt "
        f"token); {load_note()}"
    )
    print(
        f"{'routing':<9}{'arm':<6}{'episodes':>9}{'masked':>7}{'episodes/s':>11}{'requests':>9}"
        f"{'prompt tok':>11}{'recomputed':>11}{'hit rate':>9}{'at branch':>10}"
    )
    for routing in ("group", "episode"):
        flat = measure(routing, args, None)
        trees = measure(routing, args, tree)
        for name, outcome in (("flat", flat), ("tree", trees)):
            print(
                f"{routing:<9}{name:<6}{outcome.episodes:>9}{outcome.masked:>7}"
                f"{outcome.rate:>11.1f}{outcome.requests:>9}{outcome.prompt_tokens:>11}"
                f"{outcome.recomputed_tokens:>11}{outcome.hit_rate:>9.1%}"
                f"{outcome.branch_hit_rate:>10.1%}"
            )
        print(
            f"{routing}-sticky, tree / flat: {trees.rate / flat.rate:.2f}x episodes/s, "
            f"{trees.requests / flat.requests:.2f}x model requests, "
            f"{trees.recomputed_tokens / max(flat.recomputed_tokens, 1):.2f}x recomputed "
            f"prompt tokens, {trees.prompt_tokens / max(flat.prompt_tokens, 1):.2f}x prompt "
            f"tokens; hit rate at branch turns {trees.branch_hit_rate:.1%} (tree children) "
            f"vs {flat.branch_hit_rate:.1%} (flat members)"
        )


if __name__ == "__main__":
    main()

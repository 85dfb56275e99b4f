"""Reference-policy episodes/s and reward (BFCL checker) latency for ``bfcl``.

Part 1 runs shipped tasks once each with the ``reference`` policy through the rollout
dispatcher, in-process, at ``--concurrency`` (64) and at concurrency 1 (the baseline of
the ratio), separately for the multi-turn categories (live backends, a scripted user,
several user turns) and the single-turn ones (calls recorded, AST-checked).

Part 2 times the reward of each episode of part 1 (BFCL's verdict on the recorded calls,
sequentially, one thread): p50/p99 per episode. BFCL's multi-turn checker re-executes the
model's calls and the ground truth, turn by turn, on fresh backends; printed beside it:
the episode's whole environment time (reset, live tool calls, close with this same
reward) in the concurrency-1 run, where no other episode competes for the CPU.

    python benchmarks/bfcl_latency.py --tasks 400 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from envhub_bfcl.checker import judge
from envhub_bfcl.export import bfcl_result, category_of

import envhub
from envhub.policies.reference import ReferencePolicy
from envhub.rollout.dispatcher import dispatch, plan_episodes
from envhub.rollout.episode import EpisodeRunner
from envhub.trajectory import Trajectory


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1000, p99 * 1000


async def run_episodes(
    env: envhub.LocalEnvironment, ids: list[str], concurrency: int
) -> tuple[float, list[Trajectory]]:
    runner = EpisodeRunner(env, ReferencePolicy(), env_version=env.version, max_env_attempts=1)
    done: list[Trajectory] = []
    started = time.perf_counter()
    await dispatch(runner, plan_episodes(ids, 1), concurrency=concurrency, on_result=done.append)
    elapsed = time.perf_counter() - started
    wrong = [t.task_id for t in done if t.masked or t.reward != 1.0]
    if wrong:
        raise SystemExit(f"reference episodes that did not score 1: {wrong[:5]}")
    return len(done) / elapsed, done


def reward_latencies(trajectories: list[Trajectory], multi_turn: bool) -> list[float]:
    latencies = []
    for t in trajectories:
        result = bfcl_result(t.messages, multi_turn)
        if multi_turn:  # text steps are skipped by BFCL's decoder; keep the calls
            result = [[s for s in turn if not isinstance(s, str)] for turn in result]
        started = time.perf_counter()
        verdict = judge(category_of(t.task_id), t.task_id, result)
        latencies.append(time.perf_counter() - started)
        assert verdict.valid, (t.task_id, verdict)
    return latencies


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=400, help="tasks per kind (0: all)")
    parser.add_argument("--baseline-tasks", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    for kind in ("multi_turn", "single_turn"):
        env = envhub.make("bfcl", categories=kind)
        ids = [t.id for t in env.tasks]
        stride = max(1, len(ids) // args.tasks) if args.tasks else 1
        ids = ids[::stride][: args.tasks or None]
        base_ids = ids[:: max(1, len(ids) // args.baseline_tasks)][: args.baseline_tasks]
        await run_episodes(env, ids[:8], 8)  # warm: data, backends, checker imports
        base_rate, alone = await run_episodes(env, base_ids, 1)
        rate, trajectories = await run_episodes(env, ids, args.concurrency)
        print(
            f"{kind}: {rate:.1f} episodes/s at concurrency {args.concurrency} over "
            f"{len(ids)} tasks ({rate / base_rate:.2f}x concurrency 1: {base_rate:.1f}/s)"
        )
        rewards = reward_latencies(trajectories, kind == "multi_turn")
        p50, p99 = percentiles(rewards)
        env_p50, env_p99 = percentiles([t.timings.env_s for t in alone])
        turns = statistics.mean(t.metrics.turns for t in trajectories)
        print(
            f"  reward p50 {p50:.2f} ms, p99 {p99:.2f} ms per episode; whole episode's env "
            f"time alone p50 {env_p50:.2f} ms, p99 {env_p99:.2f} ms "
            f"({turns:.1f} assistant messages per episode)"
        )
        await env.aclose()


if __name__ == "__main__":
    asyncio.run(main())

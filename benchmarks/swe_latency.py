"""SWE environment benchmark: episode reset latency, reward time, episodes/s.

1. Reset latency (``env.open``: sandbox + checkout at the base commit) p50/p99 with a
   warm pool, against a cold start (pool of size 0) in the same run.
2. Reward time per task (``session.close()`` after the gold edits: diff, fresh sandbox,
   patch, full test run, grading) p50/p99, against the bare test-suite run in a
   sandbox (the floor: what grading costs beyond running the tests).
3. Episodes/s of the reference policy at ``--concurrency`` through the rollout engine,
   against concurrency 1 in the same run.

    python benchmarks/swe_latency.py --samples 20 --episodes 64 --concurrency 32

Needs Docker and the repository images (``python -m envhub_swe build``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from envhub_swe import pools
from envhub_swe.env import SweEnv
from envhub_swe.instances import resolve_instance
from envhub_swe.testrun import run_tests, setup_task

import envhub
from envhub.policies.reference import ReferencePolicy
from envhub.rollout import EpisodeRunner, dispatch, plan_episodes
from envhub.sandboxes import open_sandbox


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def fmt(xs: list[float]) -> str:
    return f"p50 {pct(xs, 0.5) * 1e3:8.1f} ms   p99 {pct(xs, 0.99) * 1e3:8.1f} ms"


async def reset_latency(task_id: str, samples: int, pool_size: int, settle_s: float) -> list[float]:
    env = envhub.make("swe", pool_size=pool_size)
    times: list[float] = []
    for _ in range(samples):
        # let the pool refill (and the last container go), as between real episodes,
        # which last far longer than a container start
        await asyncio.sleep(settle_s)
        started = time.perf_counter()
        session = await env.open(task_id)
        times.append(time.perf_counter() - started)
        await session.abort()
    return times


async def reward_times(task_ids: list[str]) -> tuple[list[float], list[float]]:
    env = envhub.make("swe")
    grading: list[float] = []
    floor: list[float] = []
    for task_id in task_ids:
        task = env.tasks.get(task_id)
        session = await env.open(task_id)
        for gold in task.gold_actions[:-1]:  # the edits, not submit
            await session.step([{"id": "g", "name": gold.name, "arguments": gold.arguments}])
        started = time.perf_counter()
        result = await session.close()
        grading.append(time.perf_counter() - started)
        assert result.reward == 1.0, (task_id, result.info)
        # the floor: one test run in an already started sandbox
        inst = resolve_instance(task, image_template=None, layout=None)
        async with open_sandbox(SweEnv()._spec(inst), "docker") as sb:
            await setup_task(sb, inst.layout, inst.bug_patch, inst.base_commit)
            started = time.perf_counter()
            await run_tests(sb, inst.repo, inst.layout)
            floor.append(time.perf_counter() - started)
    return grading, floor


async def throughput(task_ids: list[str], episodes: int, concurrency: int) -> tuple[float, float]:
    env = envhub.make("swe", pool_size=min(concurrency, 8))
    runner = EpisodeRunner(env, ReferencePolicy(), env_version=env.version)
    rewards: list[float] = []

    def collect(traj: Any) -> None:
        rewards.append(traj.reward if traj.reward is not None else float("nan"))

    started = time.perf_counter()
    await dispatch(
        runner,
        plan_episodes(task_ids, -(-episodes // len(task_ids)))[:episodes],
        concurrency=concurrency,
        on_result=collect,
    )
    elapsed = time.perf_counter() - started
    solved = sum(1 for r in rewards if r == 1.0) / max(1, len(rewards))
    return len(rewards) / elapsed, solved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--settle-s", type=float, default=3.0, help="pause between resets")
    parser.add_argument("--reward-tasks", type=int, default=10)
    parser.add_argument("--only-reset", action="store_true")
    parser.add_argument("--tasks", type=int, default=32, help="distinct tasks for episodes/s")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repos", default="inflection,cachetools")
    args = parser.parse_args()
    env = envhub.make("swe")
    repos = [f"pypi/{r}" for r in args.repos.split(",")]
    ids = [t.id for t in env.tasks if t.metadata["repo"] in repos]
    try:
        warm = asyncio.run(reset_latency(ids[0], args.samples, 2, args.settle_s))
        pools.shutdown()  # no warm containers left for the cold run
        cold = asyncio.run(reset_latency(ids[0], args.samples, 0, args.settle_s))
        print(f"reset (warm pool)  {fmt(warm)}")
        print(f"reset (cold start) {fmt(cold)}")
        print(f"  warm/cold p50 ratio {pct(warm, 0.5) / pct(cold, 0.5):.2f}")
        if args.only_reset:
            return
        grading, floor = asyncio.run(reward_times(ids[: args.reward_tasks]))
        print(f"reward per task    {fmt(grading)}")
        print(f"bare test run      {fmt(floor)}")
        print(f"  reward/test-run p50 ratio {pct(grading, 0.5) / pct(floor, 0.5):.2f}")
        tasks = ids[: args.tasks]
        eps1, solved1 = asyncio.run(throughput(tasks, max(4, args.episodes // 8), 1))
        epsn, solvedn = asyncio.run(throughput(tasks, args.episodes, args.concurrency))
        print(f"episodes/s c=1     {eps1:6.2f}  (solved {solved1:.0%})")
        print(f"episodes/s c={args.concurrency:<4}  {epsn:6.2f}  (solved {solvedn:.0%})")
        print(f"  speedup {epsn / eps1:.2f}x")
    finally:
        pools.shutdown()


if __name__ == "__main__":
    main()

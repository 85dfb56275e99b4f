"""Reasoning Gym: reward computation per episode, and reference-policy episodes/s.

Part 1 scores each task's gold answer (every default dataset, ``--size`` tasks each)
two ways, sequentially, and prints p50/p99:

* ``in-process``: the dataset's ``score_answer`` called directly (the floor; the baseline);
* ``worker``: what the environment's ``reward()`` pays: the answer screen and a round trip
  to a warm scoring worker process (pickle of the entry, JSON reply).

Part 2 runs every task with the ``reference`` policy through the rollout dispatcher
(``envhub.rollout``), in-process, at ``--concurrency`` (default 64), and prints
episodes/s against the same run at concurrency 1 (both after a warm-up run, so task
generation and worker start-up are not counted).

    python benchmarks/reasoning_gym_latency.py --size 3 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from envhub_reasoning_gym import default_datasets
from envhub_reasoning_gym.env import ReasoningGymEnv
from reasoning_gym.factory import create_dataset

import envhub
from envhub.policies.reference import ReferencePolicy
from envhub.rollout.dispatcher import dispatch, plan_episodes
from envhub.rollout.episode import EpisodeRunner


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1000, p99 * 1000


def reward_latencies(size: int) -> tuple[list[float], list[float]]:
    direct: list[float] = []
    pooled: list[float] = []
    for name in default_datasets():
        dataset = create_dataset(name, seed=0, size=size)
        env = ReasoningGymEnv(datasets=name, size=size)
        task_list = list(env.load_tasks())
        for index, task in enumerate(task_list):
            entry = dataset[index]
            started = time.perf_counter()
            dataset.score_answer(entry["answer"], entry)
            direct.append(time.perf_counter() - started)
            env.task, env.entry = task, entry
            env.score(str(entry["answer"]))  # a first call per dataset builds it in a worker
            started = time.perf_counter()
            outcome = env.score(str(entry["answer"]))
            pooled.append(time.perf_counter() - started)
            assert outcome.score == 1.0, (task.id, outcome)
    return direct, pooled


async def episodes_per_second(size: int, concurrency: int) -> tuple[float, int]:
    env = envhub.make("reasoning_gym", size=size)
    ids = await env.task_ids()
    runner = EpisodeRunner(env, ReferencePolicy(), max_env_attempts=1)
    rewards: list[float] = []
    started = time.perf_counter()
    await dispatch(
        runner,
        plan_episodes(ids, 1),
        concurrency=concurrency,
        on_result=lambda t: rewards.append(t.reward or 0.0),
    )
    elapsed = time.perf_counter() - started
    assert sum(rewards) == len(ids), "the reference policy must score 1 on every task"
    return len(ids) / elapsed, len(ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=3, help="tasks per dataset")
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    direct, pooled = reward_latencies(args.size)
    d50, d99 = percentiles(direct)
    p50, p99 = percentiles(pooled)
    datasets = len(default_datasets())
    print(f"reward per episode over {len(direct)} gold answers ({datasets} datasets)")
    print(f"  in-process score_answer  p50 {d50:8.3f} ms  p99 {d99:8.3f} ms  (baseline)")
    print(
        f"  worker (env.reward)      p50 {p50:8.3f} ms  p99 {p99:8.3f} ms  "
        f"({p50 / d50:.1f}x / {p99 / d99:.1f}x)"
    )

    asyncio.run(episodes_per_second(args.size, args.concurrency))  # warm-up
    base, count = asyncio.run(episodes_per_second(args.size, 1))
    rate, _ = asyncio.run(episodes_per_second(args.size, args.concurrency))
    print(f"reference policy, {count} episodes, in-process")
    print(f"  concurrency 1                 {base:8.1f} episodes/s  (baseline)")
    print(
        f"  concurrency {args.concurrency:<3d}               {rate:8.1f} episodes/s  "
        f"({rate / base:.2f}x)"
    )
    print(
        json.dumps(
            {
                "reward_ms": {"direct": [d50, d99], "worker": [p50, p99]},
                "episodes_per_s": {"1": base, str(args.concurrency): rate},
            }
        )
    )


if __name__ == "__main__":
    main()

"""Web environment performance: pooled vs fresh-browser resets, steps/s, memory per episode.

Run: ``python benchmarks/web_latency.py [--episodes 30] [--concurrency 8]`` (needs
Chromium for the browser figures). Everything is measured in this process, and the
pooling gain is printed as a ratio against the fresh-browser baseline of the same run.

* reset: ``env.open(task)`` + ``close()`` in browser mode (context, session cookie,
  first page, observation) with the process's browser pool, against the same episodes
  with ``fresh_browser=True`` (a Chromium launched and closed per episode);
* steps/s: gold-action replay of test tasks, text mode and browser mode;
* memory: proportional set size (PSS) of this process's Chromium processes with one
  open episode and with ``--concurrency`` open episodes; the difference per extra
  episode is the cost of one concurrent browser episode.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from envhub_web import shutdown
from envhub_web.pool import find_chromium
from envhub_web.procs import chromium_pids, pss_mib

import envhub
from envhub.types import ToolCall


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def resets(env: envhub.LocalEnvironment, task_ids: list[str]) -> list[float]:
    times = []
    for task_id in task_ids:
        started = time.perf_counter()
        session = await env.open(task_id)
        await session.close()
        times.append(time.perf_counter() - started)
    return times


async def steps_per_second(env: envhub.LocalEnvironment, task_ids: list[str]) -> float:
    steps, busy = 0, 0.0
    for task_id in task_ids:
        task = env.tasks.get(task_id)
        session = await env.open(task_id)
        started = time.perf_counter()
        for index, call in enumerate(task.gold_actions):
            await session.step([ToolCall(id=str(index), name=call.name, arguments=call.arguments)])
            steps += 1
        busy += time.perf_counter() - started
        await session.close()
    return steps / busy


async def memory_per_episode(
    env: envhub.LocalEnvironment, task_ids: list[str], concurrency: int
) -> tuple[float, float]:
    first = await env.open(task_ids[0])
    await asyncio.sleep(0.5)
    one = pss_mib(chromium_pids())
    others = await asyncio.gather(*(env.open(t) for t in task_ids[1:concurrency]))
    await asyncio.sleep(0.5)
    many = pss_mib(chromium_pids())
    for session in [first, *others]:
        await session.close()
    return one, (many - one) / max(concurrency - 1, 1)


async def main(episodes: int, concurrency: int) -> None:
    text_env = envhub.make("web", mode="text")
    test_ids = await text_env.task_ids("test")
    await steps_per_second(text_env, test_ids[:2])  # warm-up: server start, imports
    text_rate = await steps_per_second(text_env, test_ids[2 : 2 + episodes])
    print(f"text mode:    {text_rate:8.1f} steps/s ({episodes} gold episodes)")
    executable = find_chromium()
    if executable is None:
        print("no Chromium found: browser figures skipped")
        return
    browser_env = envhub.make("web", mode="browser")
    await resets(browser_env, test_ids[:2])  # warm-up: the pool's first launch
    pooled = await resets(browser_env, test_ids[:episodes])
    fresh_env = envhub.make("web", mode="browser", fresh_browser=True)
    fresh = await resets(fresh_env, test_ids[: max(episodes // 3, 5)])
    p50_pool, p99_pool = percentile(pooled, 0.5), percentile(pooled, 0.99)
    p50_fresh, p99_fresh = percentile(fresh, 0.5), percentile(fresh, 0.99)
    print(
        f"reset pooled: p50 {p50_pool * 1000:7.1f} ms  p99 {p99_pool * 1000:7.1f} ms"
        f"  ({len(pooled)} episodes)"
    )
    print(
        f"reset fresh:  p50 {p50_fresh * 1000:7.1f} ms  p99 {p99_fresh * 1000:7.1f} ms"
        f"  ({len(fresh)} episodes)"
    )
    print(
        f"pooling speed-up (p50 fresh / p50 pooled): {p50_fresh / p50_pool:.1f}x;"
        f" mean {statistics.mean(fresh) / statistics.mean(pooled):.1f}x"
    )
    browser_rate = await steps_per_second(browser_env, test_ids[: max(episodes // 3, 5)])
    print(
        f"browser mode: {browser_rate:8.1f} steps/s;"
        f" text/browser ratio {text_rate / browser_rate:.1f}x"
    )
    base, per_episode = await memory_per_episode(browser_env, test_ids, concurrency)
    print(
        f"memory: {base:.0f} MiB PSS with 1 episode; +{per_episode:.1f} MiB per extra concurrent "
        f"episode (measured with {concurrency})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    try:
        asyncio.run(main(args.episodes, args.concurrency))
    finally:
        shutdown()

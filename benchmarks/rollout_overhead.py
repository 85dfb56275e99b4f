"""Harness overhead: episodes/s and harness CPU-seconds per episode.

Workload: ``calc`` in-process, 3-turn episodes, a scripted OpenAI-compatible server with
zero latency in a separate process. Measures the envhub dispatcher (openai policy,
trajectories written to a JSONL file) at several concurrencies, a 4096-concurrent run
that must finish with zero errors, and, as the in-run baseline, a minimal asyncio loop
that drives the same sessions through the official ``openai.AsyncOpenAI`` client.

    .venv/bin/python benchmarks/rollout_overhead.py [--episodes 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from _scripted_model import ServerProcess, load_note, run, scripted_server_process

import envhub
from envhub._util.gc_tuning import gc_tuned_for_throughput
from envhub.policies import make_policy
from envhub.rollout.dispatcher import run_rollout
from envhub.rollout.episode import EpisodeRunner


async def envhub_run(
    base_url: str, episodes: int, concurrency: int, out: Path
) -> tuple[float, float, int]:
    """(wall seconds, harness CPU seconds, episodes that did not end normally)."""
    env = envhub.make("calc")
    policy = make_policy("openai", model="scripted", base_urls=[base_url])
    runner = EpisodeRunner(env, policy, env_version=env.version)
    task_ids = (await env.task_ids(None))[:episodes]
    wall, cpu = time.perf_counter(), time.process_time()
    summary = await run_rollout(runner, task_ids, out, group_size=1, concurrency=concurrency)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await policy.aclose()
    errors = summary.masked + sum(1 for k in summary.stop_reasons if k != "terminal_tool")
    return wall, cpu, errors


async def openai_sdk_loop(
    base_url: str, episodes: int, concurrency: int
) -> tuple[float, float, int]:
    """Baseline: the obvious asyncio loop over the openai SDK, no trajectory recording."""
    import openai

    env = envhub.make("calc")
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x")
    task_ids = (await env.task_ids(None))[:episodes]
    limiter = asyncio.Semaphore(concurrency)
    errors = 0

    async def episode(task_id: str) -> None:
        nonlocal errors
        try:
            await run_one(task_id)
        except Exception:  # counted; the baseline has no retry or masking
            errors += 1

    async def run_one(task_id: str) -> None:
        nonlocal errors
        async with limiter:
            session = await env.open(task_id)
            start = await session.reset()
            messages = list(start.messages)
            for _ in range(3):
                reply = await client.chat.completions.create(
                    model="scripted", messages=messages, tools=start.tools
                )
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                calls = [c.model_dump() for c in message.tool_calls or []]
                result = await session.step(calls, content=message.content)
                messages.extend(o.to_message() for o in result.observations)
                if result.done:
                    break
            closed = await session.close()
            errors += closed.stop_reason != "terminal_tool"

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(episode(t) for t in task_ids))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await client.close()
    return wall, cpu, errors


def row(
    label: str,
    concurrency: int,
    episodes: int,
    wall: float,
    cpu: float,
    server_cpu: float,
    errors: int,
) -> float:
    rate = episodes / wall
    print(
        f"{label:<18}{concurrency:>12}{rate:>12.0f}{1000 * cpu / episodes:>14.2f}"
        f"{1000 * server_cpu / episodes:>14.2f}{errors:>8}{episodes / max(cpu, 1e-9):>14.0f}"
    )
    return rate


def measured(server: ServerProcess, coro: object) -> tuple[float, float, float, int]:
    before = server.cpu_s()
    wall, cpu, errors = run(coro)  # type: ignore[misc]
    return wall, cpu, server.cpu_s() - before, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--baseline-episodes", type=int, default=500)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[64, 256, 1024])
    parser.add_argument("--big", type=int, default=4096, help="episodes at full concurrency")
    args = parser.parse_args()
    envhub.make("calc").tasks  # load the task set before timing  # noqa: B018
    # gc as `envhub rollout` sets it (the SDK loop baseline shares the process and settings)
    with (gc_tuned_for_throughput(), scripted_server_process() as server,
          tempfile.TemporaryDirectory() as tmp):
        url, n = server.base_url, args.episodes
        print(f"calc, 3-turn episodes, zero-latency scripted server; {load_note()}")
        print(
            "harness/server ms: CPU-ms per episode; cap/core: episodes/s the harness sustains "
            "on one free core (1 / harness CPU per episode)"
        )
        print(
            f"{'client':<18}{'concurrency':>12}{'episodes/s':>12}{'harness ms':>14}"
            f"{'server ms':>14}{'errors':>8}{'cap/core':>14}"
        )
        nb = args.baseline_episodes
        wall, cpu, server_cpu, errors = measured(server, openai_sdk_loop(url, nb, 256))
        base_rate = row("openai SDK loop", 256, nb, wall, cpu, server_cpu, errors)
        rates = {}
        for concurrency in args.concurrency:
            out = Path(tmp) / f"c{concurrency}.jsonl"
            wall, cpu, server_cpu, errors = measured(server, envhub_run(url, n, concurrency, out))
            rates[concurrency] = row(
                "envhub rollout", concurrency, n, wall, cpu, server_cpu, errors
            )
        if args.big:
            out = Path(tmp) / "big.jsonl"
            big = args.big
            wall, cpu, server_cpu, errors = measured(server, envhub_run(url, big, big, out))
            row("envhub rollout", big, big, wall, cpu, server_cpu, errors)
        if 256 in rates:
            print(
                f"envhub / openai SDK loop at concurrency 256: {rates[256] / base_rate:.2f}x; "
                f"target >= 300 episodes/s: {'met' if rates[256] >= 300 else 'NOT met'}"
            )


if __name__ == "__main__":
    main()

"""Keeping the model server saturated: continuous dispatch vs a synchronous batch loop.

The scripted model server answers in 200 ms, except 10% of calls that take 2 s (a long
tail, as with long generations). ``calc`` runs in-process, 3-turn episodes. Both loops
use the same policy client; they differ only in scheduling:

- continuous (``envhub.rollout.dispatch``): each of ``concurrency`` workers starts the
  next episode the moment its last one ends;
- batch: take ``concurrency`` episodes, generate for all, then step all, turn by turn,
  until the whole batch is done (every turn waits for the slowest call).

Printed per concurrency: wall times, the speedup (target >= 2.5x), and the server's
time-averaged in-flight requests divided by the concurrency, measured while work remained
(sampled every 50 ms until the last episode started; target >= 0.95).

    .venv/bin/python benchmarks/saturation.py
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
from _scripted_model import load_note, run, scripted_server_process, server_root

import envhub
from envhub.policies import OpenAIPolicy
from envhub.policies.base import GenerateRequest
from envhub.rollout.dispatcher import dispatch, plan_episodes
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec


class InFlightSampler:
    """Samples the server's in-flight request count every 50 ms while work remains to be
    started (``active``), so the average excludes the final drain of the last episodes."""

    def __init__(self, client: httpx.AsyncClient, root: str) -> None:
        self.client = client
        self.root = root
        self.active = True
        self.samples: list[int] = []

    async def run(self) -> None:
        while self.active:
            await asyncio.sleep(0.05)
            response = await self.client.get(f"{self.root}/stats")
            if self.active:
                self.samples.append(response.json()["inflight"])

    def ratio(self, concurrency: int) -> float:
        return sum(self.samples) / len(self.samples) / concurrency


async def continuous(base_url: str, task_ids: list[str], concurrency: int) -> tuple[float, float]:
    env = envhub.make("calc")
    policy = OpenAIPolicy("scripted", [base_url])
    runner = EpisodeRunner(env, policy, env_version=env.version)
    specs = plan_episodes(task_ids, 1)
    started = 0
    async with httpx.AsyncClient() as client:
        sampler = InFlightSampler(client, server_root(base_url))
        sampling = asyncio.ensure_future(sampler.run())

        def on_start(spec: EpisodeSpec) -> None:
            nonlocal started
            started += 1
            sampler.active = started < len(specs)

        wall = time.perf_counter()
        await dispatch(
            runner, specs, concurrency=concurrency, on_result=lambda t: None, on_start=on_start
        )
        wall = time.perf_counter() - wall
        await sampling
    await policy.aclose()
    return wall, sampler.ratio(concurrency)


async def batch_loop(base_url: str, task_ids: list[str], concurrency: int) -> tuple[float, float]:
    env = envhub.make("calc")
    policy = OpenAIPolicy("scripted", [base_url])
    async with httpx.AsyncClient() as client:
        sampler = InFlightSampler(client, server_root(base_url))
        sampling = asyncio.ensure_future(sampler.run())
        wall = time.perf_counter()
        for offset in range(0, len(task_ids), concurrency):
            chunk = task_ids[offset : offset + concurrency]
            sampler.active = offset + concurrency < len(task_ids)  # the last batch: no more work
            sessions = await asyncio.gather(*(env.open(t) for t in chunk))
            starts = await asyncio.gather(*(s.reset() for s in sessions))
            chats = [list(start.messages) for start in starts]
            active = list(range(len(chunk)))
            turn = 0
            while active:
                completions = await asyncio.gather(*(
                    policy.generate(GenerateRequest(chats[i], starts[i].tools, turn, chunk[i], 0))
                    for i in active
                ))  # fmt: skip
                for i, completion in zip(active, completions, strict=True):
                    chats[i].append(completion.to_message())
                results = await asyncio.gather(*(
                    sessions[i].step(c.tool_calls, content=c.content)
                    for i, c in zip(active, completions, strict=True)
                ))  # fmt: skip
                for i, result in zip(active, results, strict=True):
                    chats[i].extend(o.to_message() for o in result.observations)
                active = [i for i, r in zip(active, results, strict=True) if not r.done]
                turn += 1
            await asyncio.gather(*(s.close() for s in sessions))
        wall = time.perf_counter() - wall
        await sampling
    await policy.aclose()
    return wall, sampler.ratio(concurrency)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, nargs="*", default=[64, 256])
    parser.add_argument("--batches", type=int, default=3, help="episodes = batches x concurrency")
    args = parser.parse_args()
    task_ids = [task.id for task in envhub.make("calc").tasks.split(None)]
    server_args = ["--latency", "0.2", "--tail-latency", "2.0", "--tail-fraction", "0.1"]
    with scripted_server_process(*server_args) as server:
        base_url = server.base_url
        print(f"model latency 200 ms, 10% of calls 2 s; calc, 3-turn episodes; {load_note()}")
        print(
            f"{'concurrency':>11}{'episodes':>10}{'batch s':>10}{'continuous s':>14}{'speedup':>9}"
            f"{'in-flight/C batch':>19}{'in-flight/C cont.':>19}"
        )
        for concurrency in args.concurrency:
            ids = task_ids[: args.batches * concurrency]
            batch_wall, batch_sat = run(batch_loop(base_url, ids, concurrency))
            cont_wall, cont_sat = run(continuous(base_url, ids, concurrency))
            print(
                f"{concurrency:>11}{len(ids):>10}{batch_wall:>10.2f}{cont_wall:>14.2f}"
                f"{batch_wall / cont_wall:>8.2f}x{batch_sat:>19.3f}{cont_sat:>19.3f}"
            )
        print("targets: speedup >= 2.5x; continuous in-flight/C >= 0.95")


if __name__ == "__main__":
    main()

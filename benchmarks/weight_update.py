"""Generation slots left idle by weight updates: abort-and-resume vs finish vs stop-the-world.

Workload: ``calc`` in-process, 3-turn episodes, the versioned scripted server
(``tests/rollout/versioned_server.py``: each turn is sampled a token at a time, a fifth of
the requests 4x slower, and a weight load takes ``--load-s``) driven through SGLang's
update endpoints (:class:`~envhub.policies.weight_sync.SGLangSync`). Every mode runs the
same episodes with ``--concurrency`` generation slots and updates the weights after every
``--concurrency`` episodes:

* ``stream + abort-and-resume`` and ``stream + finish``: :func:`envhub.rollout.stream`
  with ``max_staleness=1``, the trainer calling ``update_weights`` after each batch;
* ``stop-the-world``: the synchronous loop (run a wave of episodes, wait for the last
  one, update, run the next wave);
* ``no updates``: the stream without updates, the reference for slots idle anyway
  (environment steps, the end of the run).

A slot is idle when no request of it is generating on the server; idle slot-seconds are
the integral of ``concurrency - requests generating`` over the run, sampled every 2 ms.
Printed per mode: wall time, idle slot-seconds in all and per update beyond the
reference, and the ratio of each mode's per-update idle to abort-and-resume's.

    .venv/bin/python benchmarks/weight_update.py [--tasks 32] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import envhub
from envhub.policies import OpenAIPolicy
from envhub.policies.weight_sync import SGLangSync
from envhub.rollout import EpisodeRunner, EpisodeSpec, stream
from envhub.rollout.weights import UpdatePolicy
from tests.rollout.versioned_server import HEADER, VersionConfig, VersionedServer

GROUP_SIZE = 4


async def sampled_idle(
    server: VersionedServer, slots: int, work: Callable[[], Awaitable[int]]
) -> tuple[float, float, int]:
    """Run ``work`` (returns the number of updates) while integrating idle slots:
    (wall seconds, idle slot-seconds, updates)."""
    idle = 0.0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal idle
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            idle += max(0, slots - server.stats.inflight) * (now - last)
            last = now

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    updates = await work()
    wall = time.perf_counter() - started
    done.set()
    await sampler
    return wall, idle, updates


async def streamed(
    server: VersionedServer, task_ids: list[str], concurrency: int, policy: UpdatePolicy | None
) -> int:
    env = envhub.make("calc")
    model = OpenAIPolicy("scripted", [server.base_url], weight_version_header=HEADER)
    sync = SGLangSync([server.url], "/ckpt/{version}")
    batch = concurrency // GROUP_SIZE
    updates = 0
    try:
        async with stream(
            env, model, task_ids, group_size=GROUP_SIZE, batch_size=batch,
            concurrency=concurrency, max_staleness=1, epochs=1,
        ) as rollouts:  # fmt: skip
            while groups := await rollouts.next_batch():
                assert not any(t.masked for g in groups for t in g.trajectories)
                if policy is not None and rollouts.groups_started < len(task_ids):
                    updates += 1
                    await rollouts.update_weights(updates, sync=sync, policy=policy)
    finally:
        await model.aclose()
    return updates


async def stop_the_world(server: VersionedServer, task_ids: list[str], concurrency: int) -> int:
    env = envhub.make("calc")
    model = OpenAIPolicy("scripted", [server.base_url], weight_version_header=HEADER)
    sync = SGLangSync([server.url], "/ckpt/{version}")
    runner = EpisodeRunner(env, model, env_version=env.version)
    wave = concurrency // GROUP_SIZE
    updates = 0
    try:
        for start in range(0, len(task_ids), wave):
            specs = [
                EpisodeSpec(task_id, index, f"{task_id}#{updates}")
                for task_id in task_ids[start : start + wave]
                for index in range(GROUP_SIZE)
            ]
            await asyncio.gather(*(runner.run(spec) for spec in specs))
            if start + wave < len(task_ids):
                updates += 1
                await sync.pause(abort=False)
                await sync.load(updates)
                await sync.resume()
    finally:
        await model.aclose()
    return updates


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=32, help="groups of 4 episodes")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--token-latency-s", type=float, default=0.004)
    parser.add_argument("--load-s", type=float, default=0.3)
    args = parser.parse_args()
    task_ids = (await envhub.make("calc").task_ids(None))[: args.tasks]
    modes: dict[str, Callable[[VersionedServer], Awaitable[int]]] = {
        "no updates": lambda s: streamed(s, task_ids, args.concurrency, None),
        "stream + abort-and-resume": lambda s: streamed(
            s, task_ids, args.concurrency, "abort-and-resume"
        ),
        "stream + finish": lambda s: streamed(s, task_ids, args.concurrency, "finish"),
        "stop-the-world": lambda s: stop_the_world(s, task_ids, args.concurrency),
    }
    results: dict[str, tuple[float, float, int]] = {}
    for name, work in modes.items():
        config = VersionConfig(
            token_latency_s=args.token_latency_s, slow_fraction=0.2, load_s=args.load_s
        )
        with VersionedServer(config) as server:
            results[name] = await sampled_idle(server, args.concurrency, partial(work, server))
            assert server.stats.mixed == 0
    _, reference_idle, _ = results["no updates"]
    print(
        f"{args.tasks * GROUP_SIZE} episodes, {args.concurrency} slots, "
        f"load {args.load_s}s per update, token latency {args.token_latency_s * 1000:.0f} ms"
    )
    print(f"{'mode':28} {'wall s':>7} {'updates':>7} {'idle slot-s':>11} {'per update':>10}")
    per_update: dict[str, float] = {}
    for name, (wall, idle, updates) in results.items():
        extra = (idle - reference_idle) / updates if updates else 0.0
        per_update[name] = extra
        print(f"{name:28} {wall:7.2f} {updates:7d} {idle:11.2f} {extra:10.2f}")
    base = per_update["stream + abort-and-resume"]
    for name in ("stream + finish", "stop-the-world"):
        print(f"idle per update, {name} / abort-and-resume: {per_update[name] / base:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())

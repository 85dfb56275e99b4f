"""What ``SessionHandle.fork`` costs against a fresh reset plus a replay of the same prefix.

For each environment and prefix length k (2, 8 and 32 turns of one tool call each), an
in-process session is stepped through k calls, then timed three ways, ``--repeat`` times
each, p50 reported:

* ``fork``: ``session.fork(1)``, the environment's native snapshot/restore where it has
  one (calc, sql), else the session's verified replay;
* ``fork (replay)``: the same fork with the native snapshot switched off (a subclass
  whose ``snapshot`` returns ``None``): the default every environment gets;
* ``reset+replay``: the baseline, what a caller without fork does: open a fresh session
  and step the k calls again.

The ratio column is ``fork / reset+replay`` (target for native forks: <= 0.1 at 8 turns,
flat in k). ``peak KiB`` is tracemalloc's peak over one fork (Python allocations only: a
worker process or a sandbox is not counted). Not run in CI::

    python benchmarks/fork_cost.py --envs calc sql search swe --repeat 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import envhub
from envhub.environment import Environment
from envhub.protocol import SessionHandle
from envhub.types import ToolCall

PREFIXES = (2, 8, 32)


def _calls(env: str, k: int) -> list[ToolCall]:
    """k state-free but real tool calls of ``env`` (each one turn)."""
    if env == "calc":
        return [
            ToolCall(id=f"c{i}", name="calculate", arguments={"expression": f"{i} * 7 + 1"})
            for i in range(k)
        ]
    if env == "sql":
        return [
            ToolCall(
                id=f"c{i}",
                name="run_sql",
                arguments={"query": f"SELECT COUNT(*) + {i} FROM artist"},
            )
            for i in range(k)
        ]
    if env == "swe":
        return [
            ToolCall(id=f"c{i}", name="bash", arguments={"command": f"echo {i} >> bench.txt"})
            for i in range(k)
        ]
    if env == "search":
        return [
            ToolCall(id=f"c{i}", name="search", arguments={"query": f"capital {i}"})
            for i in range(k)
        ]
    raise SystemExit(f"no prefix for {env}; choose calc, sql, search or swe")


def _options(env: str) -> dict[str, Any]:
    """swe runs on the local backend (no Docker needed), as CI's fastest repository."""
    return {"sandbox": "local"} if env == "swe" else {}


async def _task_id(env: envhub.LocalEnvironment) -> str:
    if env.name == "swe":
        from envhub_swe.instances import load_instances

        return next(t.id for t in load_instances() if t.metadata["repo"] == "pypi/inflection")
    return (await env.task_ids())[0]


def _replaying(cls: type[Environment]) -> type[Environment]:
    """``cls`` without its native snapshot: its forks replay."""

    async def snapshot(self: Environment) -> object | None:
        return None

    return type(f"Replaying{cls.__name__}", (cls,), {"snapshot": snapshot})


async def _p50(action: Callable[[], Awaitable[Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def _measure(
    env: envhub.LocalEnvironment, task_id: str, calls: list[ToolCall], repeat: int
) -> tuple[float, float, int]:
    """p50 of fork(1), p50 of reset+replay, and the peak bytes of one fork."""

    async def drive(session: SessionHandle) -> None:
        for call in calls:
            await session.step([call])

    parent = await env.open(task_id)
    await drive(parent)

    async def fork() -> None:
        (child,) = await parent.fork(1)
        await child.abort()

    async def reset_and_replay() -> None:
        session = await env.open(task_id)
        await drive(session)
        await session.abort()

    await fork()  # warm: thread pool, caches
    await reset_and_replay()
    forked = await _p50(fork, repeat)
    replayed = await _p50(reset_and_replay, repeat)
    tracemalloc.start()
    await fork()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    await parent.abort()
    return forked, replayed, peak


async def main(envs: list[str], repeat: int) -> None:
    print(
        f"{'env':8} {'k':>3} {'way':14} {'fork ms':>9} {'reset+replay ms':>16} "
        f"{'ratio':>7} {'peak KiB':>9}"
    )
    for name in envs:
        for way, env in (
            ("fork", envhub.make(name, max_turns=64, **_options(name))),
            (
                "fork (replay)",
                envhub.make(
                    _replaying(envhub.make(name).env_class), max_turns=64, **_options(name)
                ),
            ),
        ):
            task_id = await _task_id(env)
            for k in PREFIXES:
                forked, replayed, peak = await _measure(env, task_id, _calls(name, k), repeat)
                print(
                    f"{name:8} {k:>3} {way:14} {forked * 1e3:>9.2f} {replayed * 1e3:>16.2f} "
                    f"{forked / replayed:>7.3f} {peak / 1024:>9.0f}",
                    flush=True,
                )
            await env.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["calc", "sql"])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.envs, args.repeat))

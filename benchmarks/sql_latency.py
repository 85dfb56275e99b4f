"""``run_sql`` latency through the HTTP server, and reference-policy episodes/s, for ``sql``.

Part 1 runs the gold queries of shipped tasks (typical task queries: filters, joins,
GROUP BY, subqueries) as ``run_sql`` calls three ways and prints p50/p99 for each:

* ``sqlite``: the query alone on a read-only connection (the floor; the baseline);
* ``in-process``: through a ``LocalEnvironment`` session (sqlglot gate, thread hop);
* ``http``: through ``RemoteEnvironment`` to a one-worker uvicorn server running
  ``envhub.server.create_app(["sql"])`` in a subprocess (its own process, as deployed).

Ratios are against ``sqlite`` and ``in-process`` measured in this run. Each repeat
carries a distinct trailing comment, so every call pays the sqlglot gate's parse (its
cache of recent queries never hits): the figures are the uncached cost.

Part 2 runs every shipped task once with the ``reference`` policy through the rollout
dispatcher (``envhub.rollout``) at concurrency 256, in-process, and prints episodes/s
with the same run at concurrency 1 as the baseline.

    python benchmarks/sql_latency.py --tasks 200 --repeat 5 --concurrency 256
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from envhub_sql import open_readonly, run_query
from envhub_sql.catalog import resolve_database
from envhub_sql.env import gold_is_ordered, gold_rows
from envhub_sql.guard import check_query

import envhub
from envhub._util.net import free_port, wait_for_http
from envhub.clients.remote import RemoteEnvironment
from envhub.policies.reference import ReferencePolicy
from envhub.rollout.dispatcher import dispatch, plan_episodes
from envhub.rollout.episode import EpisodeRunner
from envhub.task import Task

SERVE_CODE = (
    "import sys, uvicorn; from envhub.server import create_app; "
    "uvicorn.run(create_app(['sql']), host='127.0.0.1', port=int(sys.argv[1]), "
    "log_level='warning')"
)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1000, p99 * 1000


def start_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", SERVE_CODE, str(port)])
    if wait_for_http(f"http://127.0.0.1:{port}/health", timeout_s=120, interval_s=0.2,
                     gone=lambda: proc.poll() is not None):  # fmt: skip
        return proc
    proc.kill()
    raise SystemExit("the envhub server did not start")


def sample_tasks(count: int) -> list[Task]:
    """Every n-th shipped task, so all databases and query families are represented."""
    tasks = list(envhub.make("sql").tasks)
    stride = max(1, len(tasks) // count)
    return tasks[::stride][:count]


def distinct(sql: str, index: int) -> str:
    """The same query with a unique comment: no cache along the way can serve it."""
    return f"{sql} /* run {index} {time.perf_counter_ns()} */"


def sqlite_latencies(tasks: list[Task], repeat: int) -> list[float]:
    latencies = []
    connections: dict[str, Any] = {}
    for task in tasks:
        db_id = task.metadata["db_id"]
        if db_id not in connections:
            connections[db_id] = open_readonly(resolve_database(db_id).path)
        for index in range(repeat):
            started = time.perf_counter()
            run_query(connections[db_id], distinct(task.answer, index), timeout_s=5.0, max_rows=50)
            latencies.append(time.perf_counter() - started)
    for conn in connections.values():
        conn.close()
    return latencies


async def session_latencies(
    open_session: Callable[[str], Awaitable[Any]], tasks: list[Task], repeat: int
) -> list[float]:
    """``repeat`` run_sql steps per task on one session each (sequential: pure latency)."""
    latencies = []
    for task in tasks:
        session = await open_session(task.id)
        for index in range(repeat):
            query = distinct(task.answer, index)
            call = {"id": f"q{index}", "name": "run_sql", "arguments": {"query": query}}
            started = time.perf_counter()
            result = await session.step([call])
            latencies.append(time.perf_counter() - started)
            if result.observations[0].is_error:
                raise SystemExit(f"{task.id}: {result.observations[0].content}")
        await session.close()
    return latencies


async def episodes_per_s(concurrency: int, limit: int | None) -> tuple[float, int, int, int, float]:
    """(episodes/s, episodes, episodes scoring 1, masked episodes, CPU ms per episode).

    CPU time per episode (all threads of this process) does not depend on what else the
    machine runs, so it is the figure to compare on a shared machine."""
    for cache in (check_query, gold_rows, gold_is_ordered):  # both runs start cold
        cache.cache_clear()
    env = envhub.make("sql")
    task_ids = (await env.task_ids())[:limit]
    runner = EpisodeRunner(env, ReferencePolicy(), env_version=env.version)
    rewards: list[float] = []
    masked = 0

    def on_result(trajectory: Any) -> None:
        nonlocal masked
        masked += int(trajectory.masked)
        rewards.append(trajectory.reward or 0.0)

    started, cpu = time.perf_counter(), time.process_time()
    done = await dispatch(
        runner, plan_episodes(task_ids, 1), concurrency=concurrency, on_result=on_result
    )
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return done / elapsed, done, sum(r == 1.0 for r in rewards), masked, cpu * 1000 / done


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=200, help="tasks whose gold SQL is timed")
    parser.add_argument("--repeat", type=int, default=5, help="run_sql calls per task")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--episodes", type=int, default=None, help="limit part 2 to N tasks")
    args = parser.parse_args()
    if args.repeat > 8:
        parser.error("--repeat must be <= 8 (the sql budget allows 10 turns per episode)")

    tasks = sample_tasks(args.tasks)
    for db_id in sorted({t.metadata["db_id"] for t in tasks}):
        resolve_database(db_id)  # build the cache before timing anything
    print(f"run_sql latency over {len(tasks)} tasks x {args.repeat} calls", flush=True)
    raw = sqlite_latencies(tasks, args.repeat)
    local = envhub.make("sql")
    inproc = await session_latencies(local.open, tasks, args.repeat)
    port = free_port()
    server = start_server(port)
    remote = RemoteEnvironment(f"http://127.0.0.1:{port}", "sql", transport="http")
    try:
        await session_latencies(remote.open, tasks[:10], 1)  # warm the connection pool
        http = await session_latencies(remote.open, tasks, args.repeat)
    finally:
        await remote.aclose()
        server.terminate()
        server.wait(timeout=30)
    (raw50, raw99), (in50, in99), (http50, http99) = map(percentiles, (raw, inproc, http))
    print(f"  sqlite      p50={raw50:7.2f} ms  p99={raw99:7.2f} ms   (baseline)")
    print(
        f"  in-process  p50={in50:7.2f} ms  p99={in99:7.2f} ms   "
        f"p50 ratio to sqlite {in50 / raw50:.1f}"
    )
    print(
        f"  http        p50={http50:7.2f} ms  p99={http99:7.2f} ms   "
        f"p50 ratio to in-process {http50 / in50:.2f}, to sqlite {http50 / raw50:.1f}",
        flush=True,
    )

    print("reference-policy episodes through the rollout dispatcher (in-process)", flush=True)
    base_rate, base_done, base_ok, base_masked, base_cpu = await episodes_per_s(1, args.episodes)
    print(
        f"  C=1      episodes/s={base_rate:8.1f}  CPU/episode={base_cpu:6.2f} ms  "
        f"episodes={base_done}  reward 1: {base_ok}  masked: {base_masked}"
    )
    rate, done, ok, masked, cpu = await episodes_per_s(args.concurrency, args.episodes)
    print(
        f"  C={args.concurrency:<6} episodes/s={rate:8.1f}  CPU/episode={cpu:6.2f} ms  "
        f"episodes={done}  reward 1: {ok}  masked: {masked}   "
        f"ratio to C=1: {rate / base_rate:.2f}  (CPU cores: {os.cpu_count()})"
    )


if __name__ == "__main__":
    asyncio.run(main())

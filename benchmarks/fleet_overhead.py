"""What the fleet costs: calc rollouts through a Ray fleet against the same server direct.

One run measures, on one machine:

1. **Overhead.** A 1-replica fleet; the same replica's ``envhub serve`` app is then driven
   two ways, in alternating rounds: directly (``RemoteEnvironment`` on its URL) and
   through the fleet (``FleetEnvironment``: registry discovery, health probes, the
   balancer's choice at every open). Each round is a real rollout (``envhub.rollout.run``,
   reference policy, 2-step calc episodes). Prints episodes/s and client CPU-ms per
   episode for both and the ratio fleet/direct (target >= 0.9): the server is the same
   process, so the ratio is what the fleet adds on the client.
2. **4 replicas** on this machine (``--replicas``): episodes/s through the fleet. The
   replicas share this machine's cores with the client, so expect no scaling.
3. **Failover.** (a) A rollout over those replicas; replica calc-0's process is killed
   (``ray.kill``, as a crash) once a quarter of the episodes have ended. (b) On the local
   cluster only: a 2-replica fleet, one replica per worker node, and calc-0's whole node
   killed (its raylet and processes SIGKILLed). Each prints the time from the kill to the
   last affected episode's retry (its first model turn again, on another replica) and to
   its end, and how long Ray takes to restart calc-0 (registry ``restarts=1``).
4. **Fleet up** of ``--up-replicas`` (8) replicas: seconds until all answer ``/health``,
   and the ``fleet down`` after it.

Without ``--address`` the script starts its own local Ray cluster (a head and two worker
nodes, :mod:`envhub.fleet.local_cluster`, as the fleet tests do) and removes it at the
end, killing only its own processes. ``--no-ray`` measures item 1 only, with a 1-URL
``PooledEnvironment`` in place of the fleet (the same balancer, no Ray).

    .venv/bin/python benchmarks/fleet_overhead.py
    .venv/bin/python benchmarks/fleet_overhead.py --address 127.0.0.1:6380
    .venv/bin/python benchmarks/fleet_overhead.py --no-ray --episodes 2000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from _scripted_model import load_note

import envhub
from envhub.clients.remote import RemoteEnvironment
from envhub.fleet import PooledEnvironment
from envhub.policies.base import Completion, GenerateRequest
from envhub.policies.reference import ReferencePolicy
from envhub.protocol import EnvironmentClient
from envhub.rollout import run
from envhub.rollout.runtime import run_async
from envhub.testing import serve_in_subprocess

if TYPE_CHECKING:
    from envhub.fleet.local_cluster import LocalRayCluster

NAMESPACE = "envhub-bench"


# -- a local Ray cluster (only without --address) --------------------------------------------

SLOT = "bench_slot"


@contextlib.contextmanager
def bench_cluster(head_cpus: int, worker_cpus: int) -> Iterator[LocalRayCluster]:
    """A head and two worker nodes on 127.0.0.1, each worker offering ``SLOT`` (a custom
    resource) for the node-failure fleet; only this cluster's processes are removed."""
    from envhub.fleet.local_cluster import local_ray_cluster

    with local_ray_cluster(head_cpus=head_cpus, namespace=NAMESPACE) as cluster:
        for name in ("worker-1", "worker-2"):
            cluster.add_worker(name, num_cpus=worker_cpus, resources={SLOT: 2})
        yield cluster


def kill_node_of(cluster: LocalRayCluster, node_id: str) -> None:
    """SIGKILL the raylet of node ``node_id`` and everything under it, as a machine
    failure would; returns once they are dead (Ray notices the node is gone in ~3 s)."""
    name = next(node.name for node in cluster.nodes.values() if node.node_id == node_id)
    cluster.kill_node(name, wait_dead=False)


# -- measuring --------------------------------------------------------------------------------


class Measure:
    """Episodes/s and client CPU per episode of one kind of client, over rounds."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.rates: list[float] = []
        self.cpu_ms: list[float] = []

    def add(self, episodes: int, wall_s: float, cpu_s: float) -> None:
        self.rates.append(episodes / wall_s)
        self.cpu_ms.append(1000 * cpu_s / episodes)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_ms)

    def line(self) -> str:
        rounds = ", ".join(f"{r:.0f}" for r in self.rates)
        return (f"{self.label:<26} episodes/s={self.rate:7.0f}  client CPU/episode="
                f"{self.cpu:6.2f} ms  (rounds: {rounds})")


async def rollout(env: EnvironmentClient, local: EnvironmentClient, task_ids: list[str],
                  concurrency: int, policy: Any = None,
                  on_result: Callable[[Any], None] | None = None) -> tuple[int, float, float]:
    """One rollout: (episodes, wall seconds, this process's CPU seconds)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = await run(env, policy or ReferencePolicy(), task_ids, concurrency=concurrency,
                       tasks_from=local, on_result=on_result, max_masked_fraction=0.0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    summary = result.summary
    if summary.scored != len(task_ids) or summary.mean_reward != 1.0:
        raise SystemExit(f"{env!r}: a rollout did not score every episode 1: {summary}")
    return summary.episodes, wall, cpu


async def overhead(direct: EnvironmentClient, pooled: EnvironmentClient,
                   local: EnvironmentClient, task_ids: list[str], rounds: int,
                   concurrency: int, pooled_label: str) -> None:
    """Alternating rounds on the same server, one warm-up of each first."""
    a, b = Measure("direct (RemoteEnvironment)"), Measure(pooled_label)
    for client in (direct, pooled):
        await rollout(client, local, task_ids[: len(task_ids) // 4], concurrency)
    for _ in range(rounds):
        for client, measure in ((direct, a), (pooled, b)):
            measure.add(*await rollout(client, local, task_ids, concurrency))
    print(a.line())
    print(b.line())
    print(f"ratio {pooled_label.split()[0]}/direct: episodes/s {b.rate / a.rate:.2f} "
          f"(target >= 0.9: {'met' if b.rate / a.rate >= 0.9 else 'NOT met'}), "
          f"client CPU per episode {b.cpu / a.cpu:.2f}", flush=True)


class TimedReference(ReferencePolicy):
    """The reference policy, noting when each (task, sample)'s first turn was asked for:
    an episode retried after a replica died asks for its first turn again."""

    def __init__(self) -> None:
        super().__init__()
        self.first_turns: dict[tuple[str, int], list[float]] = {}

    async def generate(self, request: GenerateRequest) -> Completion:
        if request.turn == 0:
            key = (request.task_id, request.sample_index)
            self.first_turns.setdefault(key, []).append(time.monotonic())
        return await super().generate(request)


# -- the fleet parts ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def fleet(address: str, replicas: int, resources: dict[str, float]
                ) -> AsyncIterator[list[Any]]:
    from envhub.fleet.control import fleet_down, fleet_up

    records = await asyncio.to_thread(fleet_up, address, {"calc": replicas},
                                      namespace=NAMESPACE, resources=resources,
                                      serve={"episode_timeout_s": 86400.0},
                                      insecure=True)  # a local cluster, as the baseline
    try:
        yield records
    finally:
        await asyncio.to_thread(fleet_down, address, NAMESPACE)


async def failover(address: str, fleet_env: EnvironmentClient, local: EnvironmentClient,
                   task_ids: list[str], concurrency: int, kill: Callable[[], None]) -> None:
    """``kill()`` (replica calc-0's process or node) once a quarter of the episodes have
    ended; time the retries of the episodes it held and calc-0's restart."""
    from envhub.fleet.control import fleet_status

    policy = TimedReference()
    killed_at: list[float] = []
    ended: dict[tuple[str, int], float] = {}

    def note(trajectory: Any) -> None:
        ended[(trajectory.task_id, trajectory.sample_index)] = time.monotonic()
        if len(ended) == len(task_ids) // 4:
            kill()  # blocks the loop until the processes are dead: no retry starts before
            killed_at.append(time.monotonic())

    result = await run(fleet_env, policy, task_ids, concurrency=concurrency, tasks_from=local,
                       on_result=note, max_masked_fraction=0.0)
    summary = result.summary
    retried = [key for key, times in policy.first_turns.items() if len(times) > 1]
    print(f"   {summary.episodes} episodes, {summary.scored} scored (mean reward "
          f"{summary.mean_reward}), {summary.masked} masked, retried {dict(summary.retried)}")
    kill_time = killed_at[0]
    if retried:
        last_retry = max(policy.first_turns[key][-1] for key in retried) - kill_time
        last_end = max(ended[key] for key in retried) - kill_time
        print(f"   {len(retried)} episodes were on calc-0: kill -> last retry started "
              f"{last_retry:.2f} s, -> last retried episode ended {last_end:.2f} s")
    else:
        print("   no episode was on calc-0 at the kill (too few in flight?)")
    while True:
        rows = {s.replica_id: s for s in await asyncio.to_thread(fleet_status, address,
                                                                  NAMESPACE)}
        if rows["calc-0"].restarts >= 1 and rows["calc-0"].health == "ok":
            print(f"   Ray restarted calc-0 {time.monotonic() - kill_time:.1f} s after the "
                  f"kill (new URL {rows['calc-0'].url})", flush=True)
            return
        if time.monotonic() - kill_time > 300:
            print("   calc-0 was not restarted within 300 s", flush=True)
            return
        await asyncio.sleep(0.25)


async def fleet_up_time(address: str, replicas: int, cpus: float) -> None:
    from envhub.fleet.control import fleet_down, fleet_up

    started = time.perf_counter()
    records = await asyncio.to_thread(fleet_up, address, {"calc": replicas},
                                      namespace=NAMESPACE, resources={"num_cpus": cpus},
                                      insecure=True)
    up = time.perf_counter() - started
    nodes = len({r.node_id for r in records})
    started = time.perf_counter()
    await asyncio.to_thread(fleet_down, address, NAMESPACE)
    print(f"fleet up: {replicas} replicas on {nodes} nodes healthy in {up:.1f} s; "
          f"fleet down {time.perf_counter() - started:.1f} s")


def _kill_replica(replica_id: str) -> None:
    """Kill a replica's actor process as a crash would; Ray restarts it."""
    import ray

    from envhub.fleet.ray_actors import replica_actor_name

    ray.kill(ray.get_actor(replica_actor_name(replica_id), namespace=NAMESPACE),
             no_restart=False)


async def with_ray(args: argparse.Namespace, local: EnvironmentClient, task_ids: list[str],
                   cluster: LocalRayCluster | None) -> None:
    from envhub.clients.fleet import FleetEnvironment, join_cluster

    join_cluster(args.address, NAMESPACE)
    async with fleet(args.address, 1, {"num_cpus": args.replica_cpus}) as (record,):
        direct = RemoteEnvironment(record.url, "calc")
        fleet_env = FleetEnvironment(args.address, "calc", namespace=NAMESPACE)
        try:
            print(f"\n1. overhead: one replica at {record.url}; {len(task_ids)} episodes per "
                  f"round, concurrency {args.concurrency}, {args.rounds} rounds each")
            await overhead(direct, fleet_env, local, task_ids, args.rounds, args.concurrency,
                           "fleet (FleetEnvironment)")
        finally:
            await fleet_env.aclose()
            await direct.aclose()
    if args.replicas:
        async with fleet(args.address, args.replicas, {"num_cpus": args.replica_cpus}
                         ) as records:
            nodes = len({r.node_id for r in records})
            fleet_env = FleetEnvironment(args.address, "calc", namespace=NAMESPACE)
            try:
                print(f"\n2. {args.replicas} replicas on {nodes} nodes of this machine")
                measure = Measure(f"fleet of {args.replicas}")
                await rollout(fleet_env, local, task_ids[: len(task_ids) // 4],
                              args.concurrency)
                for _ in range(args.rounds):
                    measure.add(*await rollout(fleet_env, local, task_ids, args.concurrency))
                print(measure.line())
                print(f"\n3a. failover: replica calc-0's process killed (ray.kill) under a "
                      f"rollout over {args.replicas} replicas")
                await failover(args.address, fleet_env, local, task_ids, args.concurrency,
                               lambda: _kill_replica("calc-0"))
            finally:
                await fleet_env.aclose()
    if cluster is not None:
        # one replica per worker node, each node with room for both: calc-0 comes back
        # on the other node once Ray sees its own node dead
        async with fleet(args.address, 2, {"num_cpus": 0.5, SLOT: 1}) as records:
            home = {r.replica_id: r.node_id for r in records}
            fleet_env = FleetEnvironment(args.address, "calc", namespace=NAMESPACE)
            try:
                if home["calc-0"] == home["calc-1"]:
                    raise SystemExit("Ray placed both replicas on one node (SPREAD is "
                                     "best-effort): run again")
                print("\n3b. failover: the worker node of replica calc-0 killed (raylet and "
                      "its processes SIGKILLed) under a rollout over 2 replicas")
                await failover(args.address, fleet_env, local, task_ids, args.concurrency,
                               lambda: kill_node_of(cluster, home["calc-0"]))
            finally:
                await fleet_env.aclose()
    if args.up_replicas:
        print(f"\n4. fleet up of {args.up_replicas} replicas")
        await fleet_up_time(args.address, args.up_replicas, args.up_replica_cpus)


async def without_ray(args: argparse.Namespace, local: EnvironmentClient,
                      task_ids: list[str]) -> None:
    with serve_in_subprocess("calc", "--episode-timeout", "86400") as url:
        direct = RemoteEnvironment(url, "calc")
        pool = PooledEnvironment([url], "calc")
        try:
            print(f"\n1. overhead: one envhub serve at {url}; {len(task_ids)} episodes per "
                  f"round, concurrency {args.concurrency}, {args.rounds} rounds each")
            await overhead(direct, pool, local, task_ids, args.rounds, args.concurrency,
                           "pool (PooledEnvironment)")
        finally:
            await pool.aclose()
            await direct.aclose()
    print("(items 2-4 need Ray: run without --no-ray)")


async def main_async(args: argparse.Namespace, cluster: LocalRayCluster | None = None
                     ) -> None:
    local = envhub.make("calc")
    ids = await local.task_ids(None)
    task_ids = [ids[i % len(ids)] for i in range(args.episodes)]
    if len(set(task_ids)) < len(task_ids):
        raise SystemExit(f"calc has {len(ids)} tasks: ask for at most that many --episodes")
    try:
        if args.no_ray:
            await without_ray(args, local, task_ids)
        else:
            await with_ray(args, local, task_ids, cluster)
    finally:
        await local.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", help="a running Ray cluster (HOST:PORT of the head); "
                        "default: start a local one for this run")
    parser.add_argument("--no-ray", action="store_true",
                        help="overhead only, through a 1-URL PooledEnvironment")
    parser.add_argument("--episodes", type=int, default=1000, help="per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--replicas", type=int, default=4, help="item 2-3 (0: skip)")
    parser.add_argument("--up-replicas", type=int, default=8, help="item 4 (0: skip)")
    parser.add_argument("--replica-cpus", type=float, default=1.0)
    parser.add_argument("--up-replica-cpus", type=float, default=0.5)
    args = parser.parse_args()
    print(f"calc, reference policy (2 steps per episode), WebSocket sessions; {load_note()}")
    if args.no_ray or args.address:
        run_async(main_async(args))
        return
    cpus = max(8, args.replicas, int(args.up_replicas * args.up_replica_cpus) + 1)
    with bench_cluster(head_cpus=cpus // 2, worker_cpus=cpus // 4) as cluster:
        args.address = cluster.address
        print(f"local Ray cluster at {cluster.address} (head + 2 worker nodes)")
        run_async(main_async(args, cluster))


if __name__ == "__main__":
    main()

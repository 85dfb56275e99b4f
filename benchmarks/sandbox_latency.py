"""Sandbox latency and density benchmark.

Per backend: cold start p50/p99, warm-pool acquire p50/p99, ``exec("true")`` round
trip p50/p99, and the number of sandboxes held open at once (each proven alive by one
exec) with the host memory they use. Ratios are printed against baselines measured in
the same run (warm acquire vs cold start; exec vs the local backend's exec; docker CLI
exec vs the SDK's ``exec_run``), so numbers from different machines stay comparable.

    python benchmarks/sandbox_latency.py --backends local,bwrap,docker \
        --samples 50 --concurrent bwrap=1000,docker=256

Targets (2-core machine): warm acquire p50 <= 20 ms, docker exec p50 <= 60 ms,
1000 concurrent bwrap and 256 concurrent docker sandboxes without errors.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

from envhub.sandboxes import SandboxPool, SandboxSpec, make_sandbox


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def fmt(xs: list[float]) -> str:
    return f"p50 {pct(xs, 0.5) * 1e3:8.2f} ms   p99 {pct(xs, 0.99) * 1e3:8.2f} ms"


def own_rss() -> int:
    """This process's resident memory (what holding sandbox objects costs us)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


async def cold_start(backend: str, spec: SandboxSpec, n: int) -> list[float]:
    out = []
    for _ in range(n):
        sb = make_sandbox(spec, backend)
        t0 = time.perf_counter()
        await sb.start()
        out.append(time.perf_counter() - t0)
        await sb.close()
    return out


async def warm_acquire(backend: str, spec: SandboxSpec, n: int) -> list[float]:
    out = []
    async with SandboxPool(spec, backend, min_idle=4, max_total=8) as pool:
        for _ in range(n):
            await pool.wait_idle(4)  # measure a warmed pool, as in steady state
            t0 = time.perf_counter()
            sb = await pool.acquire()
            out.append(time.perf_counter() - t0)
            await pool.release(sb)
    return out


async def exec_rtt(backend: str, spec: SandboxSpec, n: int) -> list[float]:
    out = []
    async with make_sandbox(spec, backend) as sb:
        await sb.exec("true", timeout=30)
        for _ in range(n):
            t0 = time.perf_counter()
            r = await sb.exec("true", timeout=30)
            out.append(time.perf_counter() - t0)
            assert r.exit_code == 0, r
    return out


async def docker_exec_vs_sdk(spec: SandboxSpec, n: int) -> tuple[list[float], list[float]]:
    """Baseline: the docker SDK's exec_run with the same command line the backend sends
    (``timeout -s KILL 30 sh -c true``), interleaved with the backend's own exec on the
    same container so that load changes on a shared machine hit both equally."""
    from envhub.sandboxes.docker import get_client

    ours, sdk = [], []
    cmd = ["timeout", "-s", "KILL", "30", "sh", "-c", "true"]
    async with make_sandbox(spec, "docker") as sb:
        container = get_client().containers.get(sb.container_id)  # type: ignore[attr-defined]
        await sb.exec("true", timeout=30)
        for _ in range(n):
            t0 = time.perf_counter()
            res = await asyncio.to_thread(container.exec_run, cmd, workdir=spec.workdir)
            sdk.append(time.perf_counter() - t0)
            assert res.exit_code == 0
            t0 = time.perf_counter()
            r = await sb.exec("true", timeout=30)
            ours.append(time.perf_counter() - t0)
            assert r.exit_code == 0
    return ours, sdk


async def concurrency(backend: str, spec: SandboxSpec, n: int, start_par: int) -> dict[str, Any]:
    """Open ``n`` sandboxes, prove each alive with one exec, hold them, then close."""
    sem = asyncio.Semaphore(start_par)
    opened: list[Any] = []
    errors: list[str] = []
    before, rss_before = mem_available(), own_rss()

    async def one() -> None:
        async with sem:
            sb = make_sandbox(spec, backend)
            try:
                await sb.start()
                opened.append(sb)
                r = await sb.exec("true", timeout=60)
                if r.exit_code != 0:
                    errors.append(f"exit {r.exit_code}: {r.stderr[:200]}")
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    open_s = time.perf_counter() - t0
    await asyncio.sleep(1)
    used, rss = before - mem_available(), own_rss() - rss_before
    alive = sum(1 for sb in opened if not sb.closed)
    t0 = time.perf_counter()
    sem2 = asyncio.Semaphore(start_par * 2)

    async def close(sb: Any) -> None:
        async with sem2:
            await sb.close()

    await asyncio.gather(*(close(sb) for sb in opened), return_exceptions=True)
    return {
        "n": n,
        "open": alive,
        "errors": len(errors),
        "first_errors": errors[:3],
        "open_s": open_s,
        "close_s": time.perf_counter() - t0,
        "host_mem_mib": used / 2**20,
        "own_rss_mib": rss / 2**20,
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="local,bwrap,docker")
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument(
        "--concurrent",
        default="local=100,bwrap=1000,docker=256",
        help="backend=N,... sandboxes to hold open at once (0 or absent: skip)",
    )
    ap.add_argument("--start-parallelism", type=int, default=8)
    ap.add_argument("--image", default="base")
    args = ap.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    conc = {k: int(v) for k, v in (kv.split("=") for kv in args.concurrent.split(",") if kv)}
    spec = SandboxSpec(image=args.image, memory="128MiB", pids=64)
    n = args.samples
    results: dict[str, dict[str, list[float]]] = {}
    for b in backends:
        print(f"== {b}", flush=True)
        r = results[b] = {}
        r["cold"] = await cold_start(b, spec, n)
        print(f"  cold start      {fmt(r['cold'])}", flush=True)
        r["warm"] = await warm_acquire(b, spec, n)
        print(f"  warm acquire    {fmt(r['warm'])}", flush=True)
        r["exec"] = await exec_rtt(b, spec, n)
        print(f"  exec('true')    {fmt(r['exec'])}", flush=True)
        if b == "docker":
            r["exec_il"], r["sdk_exec"] = await docker_exec_vs_sdk(spec, n)
            print(f"  exec, interleaved {fmt(r['exec_il'])}", flush=True)
            print(f"  SDK exec_run    {fmt(r['sdk_exec'])}   (baseline, same command)", flush=True)
    print("== ratios (p50, same run)")
    for b, r in results.items():
        med = {k: statistics.median(v) for k, v in r.items()}
        line = f"  {b:7s} warm/cold {med['warm'] / med['cold']:7.3f}"
        if "local" in results:
            local_exec = statistics.median(results["local"]["exec"])
            line += f"   exec/local-exec {med['exec'] / local_exec:7.2f}"
        if "sdk_exec" in med:
            line += f"   exec/sdk-exec_run {med['exec_il'] / med['sdk_exec']:5.2f} (interleaved)"
        print(line)
    for b in backends:
        if conc.get(b):
            print(f"== {b}: {conc[b]} concurrent sandboxes", flush=True)
            c = await concurrency(b, spec, conc[b], args.start_parallelism)
            per = c["host_mem_mib"] / max(1, c["open"])
            print(
                f"  open {c['open']}/{c['n']}  errors {c['errors']}  opened in {c['open_s']:.1f} s"
                f"  closed in {c['close_s']:.1f} s  host memory {c['host_mem_mib']:.0f} MiB"
                f" ({per:.2f} MiB/sandbox; MemAvailable delta, includes other users)"
                f"  envhub RSS +{c['own_rss_mib']:.0f} MiB"
            )
            for e in c["first_errors"]:
                print(f"    error: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

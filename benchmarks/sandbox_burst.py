"""Sandbox creation burst benchmark: N SWE-like episode starts at once under docker, with
and without admission control (:mod:`envhub.sandboxes.admission`), same run.

Each episode opens a docker sandbox with the SWE environment's spec (1 CPU, 512 MiB,
512 pids, 1 GiB workdir, 256 MiB /tmp), uploads a small repository, runs one command in
it, holds the sandbox ``--hold`` seconds (the episode) and closes it. All N begin at the
same instant. Reported per mode: time until every episode has started (or failed), failed
starts (with the first errors), the most creations in flight at once, peak memory above
the baseline (sampled every 100 ms: the containers' cgroup, the engine's processes and
this one; :func:`used_memory`), and containers of the run still present after it (leaked;
by the run's own ``envhub.pool`` label, so other users of the engine do not count).

    python benchmarks/sandbox_burst.py --starts 500
    python benchmarks/sandbox_burst.py --starts 60 --limits '{"concurrency": 4, "rate": 20}'

"Without" sets limits no burst reaches (the engine and the SDK's thread pool are then the
only brakes); "with" uses ``--limits`` (default: the docker defaults of docs/sandboxes.md).
Needs Docker and the ``base`` sandbox image (``envhub image build base`` or
``.ci/sandbox_setup.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from envhub.errors import SandboxError
from envhub.sandboxes import (
    AdmissionLimits,
    SandboxSpec,
    admission_limits,
    admission_stats,
    configure_admission,
    make_sandbox,
)

UNLIMITED = AdmissionLimits(concurrency=1_000_000, rate=None, wait_s=3600)


def swe_spec() -> SandboxSpec:
    return SandboxSpec(
        image="base", memory="512MiB", pids=512, cpus=1, disk="1GiB", tmpfs="256MiB",
        workdir="/work", max_lifetime_s=1800,
    )  # fmt: skip


def make_repo(root: Path) -> Path:
    """A small repository to upload, like a SWE task's checkout (40 files, ~200 KiB)."""
    for i in range(40):
        pkg = root / "repo" / f"pkg{i % 5}"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 120)
    return root / "repo"


def containers(pool: str) -> int:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=envhub.pool={pool}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return len(out.stdout.split())


_CGROUP = Path("/sys/fs/cgroup/memory/docker/memory.usage_in_bytes")  # cgroup v1 (cgroupfs)
_ENGINE = ("dockerd", "containerd", "containerd-shim-runc-v2", "runc")


def used_memory() -> int:
    """What a burst costs: every container's memory (the engine's cgroup, where it has one
    we can read), plus the resident memory of the engine's processes (dockerd, containerd,
    one shim per container) and this process. The rest of a shared machine is left out."""
    total = psutil.Process().memory_info().rss
    for proc in psutil.process_iter(["name", "memory_info"]):
        if proc.info["name"] in _ENGINE and proc.info["memory_info"] is not None:
            total += proc.info["memory_info"].rss
    try:
        total += int(_CGROUP.read_text())
    except (OSError, ValueError):
        pass  # cgroup v2 or no access: containers' memory is then not counted
    return total


class Burst:
    """One mode's run: N episodes, counters, a memory sampler."""

    def __init__(self, n: int, repo: Path, hold_s: float, pool: str) -> None:
        self.n, self.repo, self.hold_s, self.pool = n, repo, hold_s, pool
        self.started: list[float] = []
        self.errors: list[str] = []
        self.peak_mem = 0

    async def episode(self, go: asyncio.Event, t0: list[float]) -> None:
        sb = make_sandbox(swe_spec(), "docker", pool=self.pool)
        await go.wait()
        try:
            await sb.start()
            await sb.upload_dir(self.repo, "/work")
            result = await sb.exec("ls -R /work | wc -l", timeout=60)
            if not result.ok:
                raise SandboxError(f"setup command failed: {result.stderr.strip()}")
            self.started.append(time.perf_counter() - t0[0])
            await asyncio.sleep(self.hold_s)
        except SandboxError as exc:
            self.errors.append(str(exc))
        finally:
            await sb.close()

    async def sample(self, base: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.peak_mem = max(self.peak_mem, used_memory() - base)
            await asyncio.sleep(0.1)

    async def run(self) -> dict[str, Any]:
        before = containers(self.pool)
        base = used_memory()
        go, stop, t0 = asyncio.Event(), asyncio.Event(), [0.0]
        sampler = asyncio.create_task(self.sample(base, stop))
        tasks = [asyncio.create_task(self.episode(go, t0)) for _ in range(self.n)]
        await asyncio.sleep(0)
        t0[0] = time.perf_counter()
        go.set()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0[0]
        stop.set()
        await sampler
        await asyncio.sleep(0.5)  # let the engine finish removals it acknowledged
        return {
            "started": len(self.started),
            "failed": len(self.errors),
            "all_started_s": round(max(self.started, default=float("nan")), 2),
            "wall_s": round(wall, 2),
            "peak_creating": admission_stats("docker").peak_in_flight,
            "peak_mem_mib": round(self.peak_mem / 2**20),
            "leaked": containers(self.pool) - before,
            "first_errors": sorted(set(self.errors))[:3],
        }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=500, help="episodes started at once")
    ap.add_argument("--hold", type=float, default=2.0, help="seconds an episode holds its sandbox")
    ap.add_argument("--limits", default=None, help="admission limits JSON for the 'with' mode")
    ap.add_argument("--modes", default="without,with", help="which modes, in order")
    args = ap.parse_args()
    with_limits = (
        AdmissionLimits.model_validate(json.loads(args.limits))
        if args.limits
        else admission_limits("docker")
    )
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp))
        for mode in args.modes.split(","):
            configure_admission("docker", UNLIMITED if mode == "without" else with_limits)
            pool = f"burst-{uuid.uuid4().hex[:8]}"
            results[mode] = await Burst(args.starts, repo, args.hold, pool).run()
            results[mode]["rejected"] = admission_stats("docker").rejected
            print(f"{mode:8s} {json.dumps(results[mode])}", flush=True)
    limits = with_limits.model_dump(exclude={"scope"})
    print(f"starts={args.starts} hold={args.hold}s cores={psutil.cpu_count()} limits={limits}")
    if {"with", "without"} <= results.keys():
        w, wo = results["with"], results["without"]
        print(
            f"with/without: all-started {w['all_started_s'] / wo['all_started_s']:.2f}x, "
            f"peak memory {w['peak_mem_mib'] / max(1, wo['peak_mem_mib']):.2f}x, "
            f"failed {w['failed']} vs {wo['failed']}, leaked {w['leaked']} vs {wo['leaked']}"
        )
    if "with" in results and (results["with"]["failed"] or results["with"]["leaked"]):
        sys.exit(1)  # the target: admission control starts every episode and leaks nothing


if __name__ == "__main__":
    asyncio.run(main())

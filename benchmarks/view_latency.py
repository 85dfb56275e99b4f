"""``envhub view`` on big runs: time to the first render of the runs page and of page 1
of the episodes table, and the viewer's peak RSS, for 1k, 10k and 100k trajectories.

Each size runs the real CLI (``envhub view FILE --port P``) as a process twice: *cold*
with an empty index cache (the first open indexes the file) and *warm* (the index is on
disk). "start→runs" is from process start to the runs page answered, so it includes
Python start-up, imports and the first 1 MB chunk of indexing (pages answer while the
rest is read, and say how far it got); "runs"/"episodes"/"run page"/"filter p1000" are
the first request of each page alone; "all read" is from process start until the whole
file is indexed, and "run (all)" the run page then (summary, charts of every episode).
Peak RSS is the process's high-water mark (``VmHWM``). Trajectories are
small synthetic ones (``tests/view/runs.py``: ~500 bytes a line), so the figures measure
the viewer, not the disk. Ratios are against the 1k run of the same invocation.

    python benchmarks/view_latency.py [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from envhub._util.net import free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.view.runs import big_run  # noqa: E402


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(path: Path, cache: Path) -> dict[str, float]:
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "envhub.cli", "view", str(path), "--port", str(port),
         "--cache-dir", str(cache)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        while True:
            try:
                sent = time.perf_counter()
                runs = httpx.get(f"{base}/", timeout=120)
                break
            except httpx.TransportError:
                if process.poll() is not None:
                    raise RuntimeError("envhub view exited") from None
                time.sleep(0.02)
        runs_s = time.perf_counter() - sent
        to_runs = time.perf_counter() - started
        runs.raise_for_status()
        sent = time.perf_counter()
        httpx.get(f"{base}/runs/0/episodes", timeout=120).raise_for_status()
        episodes_s = time.perf_counter() - sent
        sent = time.perf_counter()
        httpx.get(f"{base}/runs/0", timeout=120).raise_for_status()
        run_s = time.perf_counter() - sent
        sent = time.perf_counter()
        httpx.get(f"{base}/runs/0/episodes?page=1000&tool=answer", timeout=120).raise_for_status()
        filtered_s = time.perf_counter() - sent
        while httpx.get(f"{base}/api/poll", timeout=120).json()["runs"][0]["behind"]:
            time.sleep(0.05)
        indexed = time.perf_counter() - started
        sent = time.perf_counter()
        httpx.get(f"{base}/runs/0", timeout=120).raise_for_status()
        full_run_s = time.perf_counter() - sent
        rss = _peak_rss_mb(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return {
        "start_to_runs": to_runs, "runs": runs_s, "episodes": episodes_s, "run": run_s,
        "filtered": filtered_s, "indexed": indexed, "full_run": full_run_s, "rss_mb": rss,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            path = Path(tmp) / f"run-{size}.jsonl"
            big_run(path, size)
            cache = Path(tmp) / f"cache-{size}"
            cold = measure(path, cache)
            warm = measure(path, cache)
            rows.append((size, os.path.getsize(path), cold, warm))
    header = (
        f"{'trajectories':>12} {'file MB':>8} {'mode':>5} {'start→runs':>11} {'runs':>7} "
        f"{'episodes':>9} {'run page':>9} {'filter p1000':>12} {'all read':>9} "
        f"{'run (all)':>9} {'peak RSS MB':>11} {'×1k':>6}"
    )
    print(header)
    base = {
        mode: data
        for size, _, *pair in rows[:1]
        for mode, data in zip(("cold", "warm"), pair, strict=True)
    }
    for size, nbytes, cold, warm in rows:
        for mode, data in (("cold", cold), ("warm", warm)):
            ratio = data["start_to_runs"] / base[mode]["start_to_runs"]
            print(
                f"{size:>12} {nbytes / 1e6:>8.1f} {mode:>5} {data['start_to_runs']:>10.2f}s "
                f"{data['runs']:>6.2f}s {data['episodes']:>8.3f}s {data['run']:>8.2f}s "
                f"{data['filtered']:>11.3f}s {data['indexed']:>8.2f}s {data['full_run']:>8.2f}s "
                f"{data['rss_mb']:>11.0f} {ratio:>6.1f}"
            )


if __name__ == "__main__":
    main()

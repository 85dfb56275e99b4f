"""Throughput of two commits side by side: after/before ratios of the server and harness
benchmarks, for a change that must not make anything slower.

Each commit is checked out as a git worktree (``/tmp/bench-<sha>``) and its benchmarks
run with this interpreter (the venv, which has envhub installed editable from another
tree) but with that worktree's code first on the import path: the worktree root, where
``envhub/server``, ``envhub/sandboxes`` and ``envhub/rewards`` are linked to the top-level
folders as the package layout maps them, and the worktree's ``environments/*``. Runs
alternate between the commits (before, after, then after, before, ...) so that a change
in the machine's load falls on both. Each configuration's verdict is the median of the
rounds' after/before ratios (a round's two runs are adjacent, so they share the load more
nearly than runs far apart); the ratios of the medians and of the best runs are printed
beside it.
Beside the rates it prints the server's CPU per step and the harness's CPU per episode
(after/before; lower is better), which a loaded machine disturbs much less than rates.

    python benchmarks/compare_commits.py --before 0e7ad85 --after HEAD --repeat 3

Configurations: ``server_throughput.py`` at C=256 and 4096 over ``ws`` and ``http``
(steps/s) and ``rollout_overhead.py`` at C=256 (episodes/s).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# package-dir of pyproject.toml: these import as envhub.<name> from top-level folders
MAPPED = ("server", "sandboxes", "rewards")
THROUGHPUT = re.compile(r"^(ws|http)\s+C=(\d+)\s+steps/s=\s*(\d+).*\n"
                        r"\s+CPU per step: server ([\d.]+) ms", re.M)
ROLLOUT = re.compile(r"^envhub rollout\s+(\d+)\s+(\d+)\s+([\d.]+)", re.M)


def worktree(commit: str) -> Path:
    """A worktree of ``commit`` at /tmp/bench-<sha> (shared by concurrent comparisons of
    the same commit) whose root imports as envhub."""
    sha = git("rev-parse", f"{commit}^{{commit}}")
    path = Path(f"/tmp/bench-{sha[:12]}")
    if not path.exists():
        git("worktree", "add", "--detach", str(path), sha)
    for name in MAPPED:
        link = path / "envhub" / name
        if not link.exists():
            link.symlink_to(Path("..") / name)
    return path


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def environment_of(tree: Path) -> dict[str, str]:
    roots = [str(tree), *sorted(str(p) for p in (tree / "environments").glob("*")
                                if (p / "pyproject.toml").exists())]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(roots)}


def check_imports(tree: Path) -> None:
    probe = "import envhub, envhub.server, envhub_calc; print(envhub.__file__, " \
            "envhub.server.__file__, envhub_calc.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=environment_of(tree),
                         check=True, capture_output=True, text=True).stdout.split()
    if not all(f.startswith(str(tree)) for f in out):
        raise SystemExit(f"{tree} does not import its own code: {out}")
    print(f"{tree}: {' '.join(out)}", flush=True)


def run(tree: Path, args: list[str]) -> str:
    done = subprocess.run([sys.executable, *args], cwd=tree, env=environment_of(tree),
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{args} failed in {tree}:\n{done.stdout}\n{done.stderr[-3000:]}")
    return done.stdout


def measure(tree: Path, duration: float, episodes: int) -> dict[str, float]:
    """Figures by name from one run of each benchmark in ``tree``: rates, and CPU
    milliseconds per step (server) or per episode (harness)."""
    figures: dict[str, float] = {}
    for transport in ("ws", "http"):
        out = run(tree, ["benchmarks/server_throughput.py", "--concurrency", "256", "4096",
                         "--duration", str(duration), "--transport", transport, "--skip-local"])
        for name, c, rate, cpu in THROUGHPUT.findall(out):
            figures[f"server {name} C={c} steps/s"] = float(rate)
            figures[f"server {name} C={c} CPU ms/step"] = float(cpu)
    out = run(tree, ["benchmarks/rollout_overhead.py", "--concurrency", "256", "--episodes",
                     str(episodes), "--baseline-episodes", "50", "--big", "0"])
    for c, rate, cpu in ROLLOUT.findall(out):
        figures[f"rollout C={c} episodes/s"] = float(rate)
        figures[f"rollout C={c} CPU ms/episode"] = float(cpu)
    if len(figures) != 10:
        raise SystemExit(f"expected 10 figures from {tree}, parsed {figures}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="commit measured as the baseline")
    parser.add_argument("--after", default="HEAD", help="commit measured against it")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each commit")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per level")
    parser.add_argument("--episodes", type=int, default=1000, help="rollout episodes")
    parser.add_argument("--floor", type=float, default=0.95, help="lowest acceptable ratio")
    args = parser.parse_args()
    trees = {"before": worktree(args.before), "after": worktree(args.after)}
    for tree in trees.values():
        check_imports(tree)
    figures: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in trees}
    for i in range(args.repeat):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for label in order:
            load = os.getloadavg()[0]
            rates = measure(trees[label], args.duration, args.episodes)
            print(f"run {i + 1} {label:<6} load {load:.1f}: "
                  + ", ".join(f"{k} {v:.3g}" for k, v in rates.items()), flush=True)
            for name, rate in rates.items():
                figures[label][name].append(rate)
    print(f"\nbefore {git('rev-parse', '--short', args.before)}, "
          f"after {git('rev-parse', '--short', args.after)}; {args.repeat} rounds; "
          "after/before of the medians, of the best runs, and paired by round")
    print(f"{'configuration':<32}{'before':>10}{'after':>10}{'medians':>9}{'best':>7}"
          f"{'paired (verdict)':>18}   rounds' ratios")
    slower = []
    for name in figures["before"]:
        befores, afters = figures["before"][name], figures["after"][name]
        before, after = statistics.median(befores), statistics.median(afters)
        rounds = [a / b for a, b in zip(afters, befores, strict=True)]
        paired = statistics.median(rounds)
        best = min(afters) / min(befores) if "CPU" in name else max(afters) / max(befores)
        print(f"{name:<32}{before:>10.3g}{after:>10.3g}{after / before:>9.2f}{best:>7.2f}"
              f"{paired:>18.2f}   {' '.join(f'{r:.2f}' for r in rounds)}")
        if "CPU" not in name and paired < args.floor:
            slower.append(name)
    if slower:
        raise SystemExit(f"rates after/before below {args.floor}: {', '.join(slower)}")


if __name__ == "__main__":
    main()

"""Throughput of two versions of envhub side by side: after/before ratios of the server and
harness benchmarks, for a change that must not make anything slower.

Configurations: ``server_throughput.py`` at ``--concurrency`` (256) over ``ws`` and ``http``
(steps/s) and ``rollout_overhead.py`` at C=256 (episodes/s). Runs alternate between the
versions (before, after, then after, before, ...) so that a change in the machine's load
falls on both. Each configuration's verdict is the median of the rounds' after/before
ratios (a round's two runs are adjacent, so they share the load more nearly than runs far
apart); the ratio of the medians is printed beside it, and so is each side's CPU per step
(server) or per episode (harness), which a loaded machine disturbs much less than rates.
It exits 1 when a verdict is below ``--floor``.

Each version runs its own copy of the benchmarks (their imports follow the code) with
this interpreter, so both share the venv's dependencies. The venv has envhub installed
editable from this checkout: setuptools' finder (``__editable___envhub_*_finder.py``, put
on ``sys.meta_path`` by a ``.pth``) maps ``envhub`` to ``envhub/`` and, by pyproject's
package-dir, ``envhub.server``, ``envhub.sandboxes`` and ``envhub.rewards`` to the
top-level folders (the plugins have finders of their own). A commit is checked out as a
git worktree at ``/tmp/bench-<sha>``, with the mapped folders linked where the path finder
looks for them (``envhub/server -> ../server``, ...) and a ``sitecustomize`` that drops
the editable finders: with the worktree's root and ``environments/<name>`` first on
PYTHONPATH (which the benchmarks' own subprocesses inherit), its code is the only envhub
there is, and a module the commit lacks fails to import instead of coming from here.
``--after`` left out measures this checkout's working tree, uncommitted changes included,
through the finders as installed. Before measuring, each tree must show that every
``envhub*`` module a server and the calc plugin import was loaded from inside it.

    python benchmarks/compare_commits.py --repeat 5
    python benchmarks/compare_commits.py --before 0e7ad85 --after HEAD --concurrency 256 4096
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
THROUGHPUT = re.compile(r"^(ws|http)\s+C=(\d+)\s+steps/s=\s*(\d+).*errors=(\d+).*\n"
                        r"\s+CPU per step: server ([\d.]+) ms", re.M)
ROLLOUT = re.compile(r"^envhub rollout\s+(\d+)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+(\d+)", re.M)
# PYTHONPATH entry of a worktree: the venv's editable finders point at this checkout
SITECUSTOMIZE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path
                    if not getattr(f, "__module__", "").startswith("__editable__")]
"""
PROBE = """import sys, envhub, envhub.server.app, envhub.sandboxes, envhub.rewards, envhub_calc
print(envhub.__file__, *sorted(m.__file__ for n, m in list(sys.modules.items())
                               if n.startswith("envhub") and getattr(m, "__file__", None)))"""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def worktree(commit: str) -> Path:
    """A worktree of ``commit`` at /tmp/bench-<sha> (reused by later comparisons) whose
    root imports as envhub."""
    sha = git("rev-parse", f"{commit}^{{commit}}")
    path = Path(f"/tmp/bench-{sha[:12]}")
    if not path.exists():  # --force: a worktree deleted by hand is still registered
        git("worktree", "add", "--force", "--detach", str(path), sha)
    for name in MAPPED:
        link = path / "envhub" / name
        if not link.exists():
            link.symlink_to(Path("..") / name)
    (path / ".bench").mkdir(exist_ok=True)
    (path / ".bench" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return path


def environment_of(tree: Path) -> dict[str, str]:
    plugins = sorted(p.parent for p in (tree / "environments").glob("*/pyproject.toml"))
    roots = [p for p in (tree / ".bench", tree, *plugins) if p.exists()]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, roots))}


def check_imports(tree: Path) -> None:
    """Exit unless every envhub module and plugin that a benchmark loads comes from ``tree``."""
    package, *files = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tree, env=environment_of(tree), check=True,
        capture_output=True, text=True).stdout.split()
    strays = [f for f in files if not Path(f).resolve().is_relative_to(tree)]
    if strays:
        raise SystemExit(f"{tree} does not import its own code: {strays}")
    print(f"{tree}: envhub from {package}, all {len(files)} envhub* modules from this tree",
          flush=True)


def run(tree: Path, args: list[str]) -> str:
    done = subprocess.run([sys.executable, *args], cwd=tree, env=environment_of(tree),
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{args} failed in {tree}:\n{done.stdout}\n{done.stderr[-3000:]}")
    return done.stdout


def measure(tree: Path, concurrency: list[int], duration: float,
            episodes: int) -> dict[str, float]:
    """Figures by name from one run of each benchmark in ``tree``: rates, and CPU
    milliseconds per step (server) or per episode (harness). A run with errors is refused:
    its rate would not measure the same work."""
    figures: dict[str, float] = {}
    errors: list[str] = []
    for transport in ("ws", "http"):
        out = run(tree, ["benchmarks/server_throughput.py", "--concurrency", *map(str, concurrency),
                         "--duration", str(duration), "--transport", transport, "--skip-local"])
        for name, c, rate, failed, cpu in THROUGHPUT.findall(out):
            figures[f"server {name} C={c} steps/s"] = float(rate)
            figures[f"server {name} C={c} CPU ms/step"] = float(cpu)
            errors += [f"server {name} C={c}: {failed} errors"] if int(failed) else []
    out = run(tree, ["benchmarks/rollout_overhead.py", "--concurrency", "256", "--episodes",
                     str(episodes), "--baseline-episodes", "50", "--big", "0"])
    for c, rate, cpu, failed in ROLLOUT.findall(out):
        figures[f"rollout C={c} episodes/s"] = float(rate)
        figures[f"rollout C={c} CPU ms/episode"] = float(cpu)
        errors += [f"rollout C={c}: {failed} errors"] if int(failed) else []
    if errors or len(figures) != 4 * len(concurrency) + 2:
        raise SystemExit(f"{tree}: {'; '.join(errors) or f'parsed only {figures}'}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="62e0415",
                        help="commit measured as the baseline (default: before issue 30)")
    parser.add_argument("--after", help="commit measured against it (default: the working tree)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each version")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[256],
                        help="server sessions (the harness runs at 256)")
    parser.add_argument("--duration", type=float, default=3.0, help="server seconds per level")
    parser.add_argument("--episodes", type=int, default=1000, help="rollout episodes")
    parser.add_argument("--floor", type=float, default=0.95, help="lowest acceptable ratio")
    args = parser.parse_args()
    trees = {"before": worktree(args.before),
             "after": worktree(args.after) if args.after else REPO}
    for tree in trees.values():
        check_imports(tree)
    figures: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in trees}
    for i in range(args.repeat):
        for label in ("before", "after") if i % 2 == 0 else ("after", "before"):
            load = os.getloadavg()[0]
            values = measure(trees[label], args.concurrency, args.duration, args.episodes)
            print(f"run {i + 1} {label:<6} load {load:.1f}: "
                  + ", ".join(f"{k} {v:.4g}" for k, v in values.items()), flush=True)
            for name, value in values.items():
                figures[label][name].append(value)
    after = git("rev-parse", "--short", args.after) if args.after else "working tree"
    print(f"\nbefore {git('rev-parse', '--short', args.before)}, after {after}; "
          f"{args.repeat} rounds; after/before of the medians and paired by round")
    print(f"{'configuration':<32}{'before':>10}{'after':>10}{'medians':>9}"
          f"{'paired (verdict)':>18}   rounds' ratios")
    slower = []
    for name, befores in figures["before"].items():
        afters = figures["after"][name]
        rounds = [a / b for a, b in zip(afters, befores, strict=True)]
        paired = statistics.median(rounds)
        before, after_median = statistics.median(befores), statistics.median(afters)
        print(f"{name:<32}{before:>10.4g}{after_median:>10.4g}{after_median / before:>9.2f}"
              f"{paired:>18.2f}   {' '.join(f'{r:.2f}' for r in rounds)}")
        if "CPU" not in name and paired < args.floor:
            slower.append(name)
    if slower:
        raise SystemExit(f"rates after/before below {args.floor}: {', '.join(slower)}")


if __name__ == "__main__":
    main()

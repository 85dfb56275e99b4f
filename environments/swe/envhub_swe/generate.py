"""Task generation: inject procedural bugs, keep those the test suite catches.

For each repository: run the suite once for the baseline, then try seeded candidates
(one bug, or two or three combined). A candidate becomes a task iff the suite still
collects and finishes within the time limit, at least one baseline-passing test
fails, and fewer than ``max_fail_fraction`` of them fail. Failing tests form
FAIL_TO_PASS, the rest of the baseline-passing ones PASS_TO_PASS. Logs are read with
envhub's semantics of :mod:`envhub.rewards.swe` (exact node ids from the ``-rA``
summary), the reading that later grades the tasks. The gold patch is the reverse diff;
the gold actions are ``str_replace`` edits with a unique ``old_str``.

Same seed, same catalog, same tests -> the same tasks (ids are content hashes).

    python -m envhub_swe.generate --per-repo 50 --seed 0 -o envhub_swe/data/tasks.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import hashlib
import json
import random
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst

from envhub.rewards.swe import PASSING, passed_tests, read_statuses
from envhub.sandboxes import Sandbox, SandboxSpec, open_sandbox
from envhub_swe.build import base_commit, host_layout, prepare_repo
from envhub_swe.catalog import Layout, RepoSpec, load_catalog
from envhub_swe.mutations import Site, apply_sites, find_sites
from envhub_swe.statements import problem_statement
from envhub_swe.testrun import TestRun, checkout, commit_all, run_tests

__all__ = ["generate_repo", "gold_edits", "unified_patch"]


@dataclass
class Candidate:
    files: dict[str, str]  # path -> buggy source
    kinds: list[str]
    sites: list[tuple[str, int, str]]  # (path, line, function)


def unified_patch(path: str, before: str, after: str) -> str:
    """A ``git apply``-able diff turning ``before`` into ``after``."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    text = f"diff --git a/{path} b/{path}\n" + "".join(lines)
    return text if text.endswith("\n") else text + "\n"


def gold_edits(path: str, buggy: str, fixed: str) -> list[dict[str, str]]:
    """``str_replace`` calls that turn ``buggy`` into ``fixed``, each ``old_str`` unique
    in the file at the moment it is applied (context grows line by line until it is)."""
    edits: list[dict[str, str]] = []
    current = buggy
    while current != fixed:
        a = current.splitlines(keepends=True)
        b = fixed.splitlines(keepends=True)
        ops = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
               if op[0] != "equal"]  # fmt: skip
        _, i1, i2, j1, j2 = ops[0]
        ctx = 0
        while True:
            lo, hi = max(0, i1 - ctx), min(len(a), i2 + ctx)
            old = "".join(a[lo:hi])
            new = "".join(a[lo:i1]) + "".join(b[j1:j2]) + "".join(a[i2:hi])
            if old and current.count(old) == 1:
                break
            if lo == 0 and hi == len(a):
                raise ValueError(f"no unique context for an edit in {path}")
            ctx += 1
        edits.append({"command": "str_replace", "path": path, "old_str": old, "new_str": new})
        current = current.replace(old, new, 1)
    return edits


def _candidates(repo: RepoSpec, root: Path, rng: random.Random, limit: int) -> Iterator[Candidate]:
    """Up to ``limit`` seeded candidate bugs for ``repo`` (lazily: each one rewrites a
    whole module, which takes libcst tens of milliseconds)."""
    files = sorted({str(p.relative_to(root)) for g in repo.sources for p in root.glob(g)})
    modules = {f: cst.parse_module((root / f).read_text()) for f in files}
    sites: list[tuple[str, Site]] = [(f, s) for f in files for s in find_sites(modules[f])]
    by_kind: dict[str, list[tuple[str, Site]]] = {}
    for entry in sites:
        by_kind.setdefault(entry[1].kind, []).append(entry)
    kinds = sorted(by_kind)
    seen: set[tuple[int, ...]] = set()
    produced = 0
    for _ in range(len(sites) * 2):
        if produced >= limit:
            return
        n = rng.choices((1, 2, 3), weights=(7, 2, 1))[0]
        chosen: list[tuple[str, Site]] = []
        for _ in range(n):
            f, s = rng.choice(by_kind[rng.choice(kinds)])
            if all(s.function != c.function or f != cf for cf, c in chosen):
                chosen.append((f, s))
        key = tuple(sorted(id(s) for _, s in chosen))
        if key in seen:
            continue
        seen.add(key)
        changed: dict[str, str] = {}
        for f in sorted({f for f, _ in chosen}):
            src = apply_sites(modules[f], [s for cf, s in chosen if cf == f])
            if src != modules[f].code:
                try:
                    compile(src, f, "exec")
                except SyntaxError:
                    break
                changed[f] = src
        else:
            if changed and len(changed) == len({f for f, _ in chosen}):
                produced += 1
                yield Candidate(
                    files=changed,
                    kinds=sorted({s.kind for _, s in chosen}),
                    sites=[(f, s.line, s.function) for f, s in chosen],
                )


async def _evaluate(
    sb: Sandbox, repo: RepoSpec, layout: Layout, cand: Candidate, timeout: float
) -> TestRun:
    for path, src in cand.files.items():
        await sb.write_file(path, src.encode())
    try:
        return await run_tests(sb, repo, layout, timeout=timeout)
    finally:
        await sb.exec("git checkout -q -- . && git clean -fdq", timeout=60)


async def _bug_commit(sb: Sandbox, cand: Candidate) -> str:
    """The hash of the commit that puts the bug on top of the pristine base commit."""
    for path, src in cand.files.items():
        await sb.write_file(path, src.encode())
    try:
        return await commit_all(sb)
    finally:
        await sb.exec("git reset -q --hard HEAD~1 && git clean -fdq", timeout=60)


#: the generating sandbox's directories as they show in tracebacks (random temp names)
_SANDBOX_DIR = re.compile(r"/[^\s'\"]*?/envhub-[a-z]+-[^/\s'\"]+/(work|tmp)/")


def relative_paths(log: str) -> str:
    """Tracebacks with repository-relative paths (and ``/tmp``): reproducible, and no
    host paths in problem statements."""
    return _SANDBOX_DIR.sub(lambda m: "" if m.group(1) == "work" else "/tmp/", log)


def _split(run: TestRun, passing: list[str]) -> tuple[list[str], list[str]]:
    """``(FAIL_TO_PASS, PASS_TO_PASS)``: the baseline-passing tests ``run`` fails, passes."""
    statuses = read_statuses(run.log, passing)
    return (
        [t for t in passing if statuses.get(t) not in PASSING],
        [t for t in passing if statuses.get(t) in PASSING],
    )


def _record(
    repo: RepoSpec,
    pristine: str,
    commit: str,
    root: Path,
    cand: Candidate,
    run: TestRun,
    passing: list[str],
    seed: int,
) -> dict[str, Any]:
    f2p, p2p = _split(run, passing)
    patch = bug_patch = ""
    edits: list[dict[str, str]] = []
    for path in sorted(cand.files):
        original = (root / path).read_text()
        patch += unified_patch(path, cand.files[path], original)
        bug_patch += unified_patch(path, original, cand.files[path])
        edits += gold_edits(path, cand.files[path], original)
    digest = hashlib.sha256(patch.encode()).hexdigest()[:8]
    instance_id = f"{repo.name}__{'+'.join(cand.kinds)}-{digest}"
    rng = random.Random(f"{seed}:{instance_id}")
    return {
        "instance_id": instance_id,
        "repo": repo.repo_id,
        "version": repo.version,
        "base_commit": commit,
        "environment_setup_commit": pristine,
        "bug_patch": bug_patch,
        "patch": patch,
        "test_patch": "",
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "problem_statement": problem_statement(
            name=repo.name, version=repo.version, failing=f2p, log=relative_paths(run.log), rng=rng
        ),
        "image": f"envhub/swe-{repo.key}",
        "gold_edits": edits,
        "bug_kinds": cand.kinds,
        "bug_sites": [list(s) for s in cand.sites],
    }


async def generate_repo(
    repo: RepoSpec,
    *,
    per_repo: int,
    seed: int,
    max_candidates: int,
    workers: int = 2,
    max_fail_fraction: float = 0.3,
    log: Any = print,
) -> list[dict[str, Any]]:
    """Up to ``per_repo`` validated tasks for ``repo`` (host ``local`` sandboxes)."""
    layout = host_layout(repo)
    root = prepare_repo(repo)
    pristine = base_commit(repo)
    spec = SandboxSpec(image="python", env=layout.env(repo, "."), memory="2GiB", pids=512)
    async with open_sandbox(spec, "local") as sb:
        await checkout(sb, layout)
        baseline = await run_tests(sb, repo, layout, timeout=600)
    if not baseline.collected:
        raise RuntimeError(f"{repo.name}: baseline run failed:\n{baseline.log[-3000:]}")
    passing = passed_tests(baseline.log)
    timeout = max(30.0, 5 * baseline.duration_s)
    log(f"{repo.name}: baseline {len(passing)} passing in {baseline.duration_s:.1f}s")
    candidates = _candidates(repo, root, random.Random(f"{seed}:{repo.name}"), max_candidates)
    queue: list[Candidate] = []
    results: dict[int, dict[str, Any]] = {}
    accepted = 0
    next_index = 0

    async def worker() -> None:
        nonlocal accepted, next_index
        async with open_sandbox(spec, "local") as sb:
            await checkout(sb, layout)
            while accepted < per_repo:
                if next_index == len(queue):
                    cand = next(candidates, None)
                    if cand is None:
                        return
                    queue.append(cand)
                index = next_index
                next_index += 1
                run = await _evaluate(sb, repo, layout, queue[index], timeout)
                failing, _ = _split(run, passing)
                if not run.collected or not failing:
                    continue
                if len(failing) >= max_fail_fraction * len(passing):
                    continue
                commit = await _bug_commit(sb, queue[index])
                results[index] = _record(
                    repo, pristine, commit, root, queue[index], run, passing, seed
                )
                accepted += 1

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    # candidate order, not completion order: the output does not depend on timing
    records = [results[i] for i in sorted(results)][:per_repo]
    log(
        f"{repo.name}: {len(records)} tasks from {next_index} candidates "
        f"in {time.monotonic() - started:.0f}s"
    )
    return records


def assign_splits(records: list[dict[str, Any]], seed: int, test_fraction: float) -> None:
    """A seeded, per-repository train/test split."""
    for rec in records:
        h = hashlib.sha256(f"{seed}:{rec['instance_id']}".encode()).digest()
        rec["split"] = "test" if h[0] / 256 < test_fraction else "train"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--per-repo", type=int, default=50)
    parser.add_argument("--max-candidates", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    catalog = load_catalog()
    names = args.repos.split(",") if args.repos else [r.name for r in catalog.repos]
    records: list[dict[str, Any]] = []
    for name in names:
        records += asyncio.run(
            generate_repo(
                catalog.get(name),
                per_repo=args.per_repo,
                seed=args.seed,
                max_candidates=args.max_candidates,
                workers=args.workers,
                log=lambda msg: print(msg, file=sys.stderr, flush=True),
            )
        )
    assign_splits(records, args.seed, args.test_fraction)
    with open(args.output, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
    print(f"wrote {len(records)} tasks to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Validate every shipped SWE task in its repository image (not run in CI: ~1 h on 2 cores).

Per task, in a fresh sandbox of the chosen backend:
1. the repository checks out at the task's base commit (bug patch commits to the
   recorded hash);
2. at the base commit every FAIL_TO_PASS test fails and every PASS_TO_PASS test
   passes (the bug reproduces in the image, not only on the generating host);
3. with the gold patch applied the task grades FULL (SWE-bench "resolved").

    python environments/swe/scripts/validate_catalog.py --concurrency 2 \
        --report /tmp/swe-validation.json

Prints a per-repository summary; exits 1 if any task fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from typing import Any

from envhub_swe.env import SweEnv
from envhub_swe.instances import load_instances
from envhub_swe.testrun import apply_patch, run_tests, setup_task

from envhub import Task
from envhub.rewards.swe import PASSING, read_statuses
from envhub.sandboxes import shared_pools as pools


async def validate(task: Task, env: SweEnv) -> dict[str, Any]:
    inst = env._resolve(task)
    out: dict[str, Any] = {"id": task.id, "repo": inst.repo.name, "ok": False}
    started = time.monotonic()
    sb = await pools.acquire(env._spec(inst), env.backend, group="swe", min_idle=0)
    try:
        await setup_task(sb, inst.layout, inst.bug_patch, inst.base_commit)
        base = await run_tests(sb, inst.repo, inst.layout, timeout=env.test_timeout_s)
        statuses = read_statuses(base.log, [*inst.fail_to_pass, *inst.pass_to_pass])
        still_passing = [t for t in inst.fail_to_pass if statuses.get(t) in PASSING]
        broken = [t for t in inst.pass_to_pass if statuses.get(t) not in PASSING]
        out["base"] = {"f2p_passing": still_passing[:5], "p2p_failing": broken[:5]}
        if not await apply_patch(sb, task.metadata["patch"]):
            out["error"] = "gold patch does not apply"
            return out
        fixed = await run_tests(sb, inst.repo, inst.layout, timeout=env.test_timeout_s)
        result = inst.grade(fixed)
        out["gold"] = {
            "resolution": result.resolution.value,
            "failed_f2p": list(result.failed_f2p[:5]),
            "failed_p2p": list(result.failed_p2p[:5]),
        }
        out["ok"] = not still_passing and not broken and result.resolved
    except Exception as exc:  # a report line per task, not one crash for the catalog
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        await pools.release(sb)
        out["seconds"] = round(time.monotonic() - started, 1)
    return out


async def run(tasks: list[Task], env: SweEnv, concurrency: int) -> list[dict[str, Any]]:
    sem = asyncio.Semaphore(concurrency)
    results: list[dict[str, Any]] = []

    async def one(task: Task) -> None:
        async with sem:
            res = await validate(task, env)
        results.append(res)
        mark = "ok  " if res["ok"] else "FAIL"
        print(f"[{len(results)}/{len(tasks)}] {mark} {res['id']} {res['seconds']}s", flush=True)

    await asyncio.gather(*(one(t) for t in tasks))
    return sorted(results, key=lambda r: r["id"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandbox", default="docker", help="docker (default) or local")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--repos", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="tasks per repository")
    parser.add_argument("--report", default=None, help="write the per-task results as JSON")
    args = parser.parse_args()
    env = SweEnv(sandbox=args.sandbox)
    tasks = list(load_instances())
    if args.repos:
        wanted = {f"pypi/{r}" for r in args.repos.split(",")}
        tasks = [t for t in tasks if t.metadata["repo"] in wanted]
    if args.limit:
        seen: Counter[str] = Counter()
        kept = []
        for t in tasks:
            seen[t.metadata["repo"]] += 1
            if seen[t.metadata["repo"]] <= args.limit:
                kept.append(t)
        tasks = kept
    started = time.monotonic()
    try:
        results = asyncio.run(run(tasks, env, args.concurrency))
    finally:
        pools.shutdown("swe")
    total: Counter[str] = Counter(r["repo"] for r in results)
    ok: Counter[str] = Counter(r["repo"] for r in results if r["ok"])
    print(f"\n{'repository':<12} {'tasks':>5} {'valid':>5}")
    for repo in sorted(total):
        print(f"{repo:<12} {total[repo]:>5} {ok[repo]:>5}")
    print(f"{'all':<12} {sum(total.values()):>5} {sum(ok.values()):>5}")
    print(f"({time.monotonic() - started:.0f}s, concurrency {args.concurrency}, {args.sandbox})")
    if args.report:
        with open(args.report, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    failures = [r for r in results if not r["ok"]]
    for r in failures[:20]:
        print(f"FAIL {r['id']}: {json.dumps({k: r[k] for k in r if k not in ('id', 'ok')})}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""The shipped tasks: SWE-bench records that keep the generator's promises, and a
generator that is reproducible from its seed."""

from __future__ import annotations

import hashlib
import random
from collections import Counter

from envhub_swe.build import prepare_repo
from envhub_swe.catalog import load_catalog
from envhub_swe.generate import _candidates
from envhub_swe.instances import load_instances

SWEBENCH_KEYS = {
    "instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS",
    "PASS_TO_PASS", "problem_statement", "image", "version", "environment_setup_commit",
}  # fmt: skip


def test_shipped_tasks_are_valid_swebench_records() -> None:
    tasks = list(load_instances())
    repos = Counter(t.metadata["repo"] for t in tasks)
    assert len(tasks) >= 200 and len(repos) >= 5, repos
    assert {t.split for t in tasks} == {"train", "test"}
    catalog = {f"pypi/{r.name}" for r in load_catalog().repos}
    for task in tasks:
        rec = task.metadata
        assert SWEBENCH_KEYS <= rec.keys() and rec["repo"] in catalog
        f2p, p2p = rec["FAIL_TO_PASS"], rec["PASS_TO_PASS"]
        assert f2p and not set(f2p) & set(p2p)
        assert len(f2p) < 0.3 * (len(f2p) + len(p2p))
        # the id is a content hash of the gold patch: fixed across regenerations
        assert task.id.endswith(hashlib.sha256(rec["patch"].encode()).hexdigest()[:8])
        assert rec["test_patch"] == "" and rec["bug_patch"] and rec["problem_statement"]
        assert [g.name for g in task.gold_actions][-1] == "submit"
        assert all(g.arguments["command"] == "str_replace" for g in task.gold_actions[:-1])
        # the issue names the failing tests; no host path of the generating machine
        assert f2p[0] in rec["problem_statement"]
        assert "envhub-local-" not in rec["problem_statement"]


def test_candidates_are_reproducible_from_the_seed() -> None:
    repo = load_catalog().get("inflection")
    root = prepare_repo(repo)

    def first(seed: str) -> list[tuple[list[str], dict[str, str]]]:
        return [(c.kinds, c.files) for c in _candidates(repo, root, random.Random(seed), 6)]

    assert first("0:inflection") == first("0:inflection")
    assert first("0:inflection") != first("1:inflection")

"""Without Docker: the same tasks under bwrap (repository and requirements uploaded into
each sandbox) and local (no isolation, for development)."""

from __future__ import annotations

import os

import pytest

from envhub.sandboxes.bwrap import bwrap_problem
from envhub.testing import check_environment


@pytest.mark.parametrize("backend", ["bwrap", "local"])
def test_gold_and_noop_without_docker(backend: str, ci_task_ids: list[str]) -> None:
    if backend == "bwrap" and (problem := bwrap_problem()):
        if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bwrap required (ENVHUB_REQUIRE_BWRAP=1) but {problem}")
        pytest.skip(problem)
    ids = ci_task_ids[:1] + ci_task_ids[-1:]  # one task of each CI repository
    report = check_environment("swe", task_ids=ids, sandbox=backend, concurrency=2)
    assert report.checked == len(ids)

"""envhub check over two seeds of every Reasoning Gym dataset: gold answers score 1 and a
no-op 0, except exactly the datasets the plugin lists as not checkable."""

from __future__ import annotations

import asyncio
import os

import pytest
from envhub_reasoning_gym import NOT_CHECKABLE, all_datasets, default_datasets

import envhub
from envhub.errors import InvalidRequest
from envhub.rollout.check import CheckReport, check_tasks
from envhub.sandboxes.bwrap import bwrap_problem
from envhub.testing import check_environment

GENERATES_BY_DEFAULT = [name for name in all_datasets() if name != "composite"]


def _check(datasets: list[str], seed: int) -> tuple[CheckReport, dict[str, str]]:
    async def run() -> tuple[CheckReport, dict[str, str]]:
        env = envhub.make("reasoning_gym", datasets=datasets, size=2, seed=seed)
        try:
            ids = await env.task_ids()
            dataset_of = {i: (await env.task(i)).metadata["dataset"] for i in ids}
            return await check_tasks(env, ids, concurrency=32), dataset_of
        finally:
            await env.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize("seed", [0, 1])
def test_every_dataset_over_two_seeds(seed: int) -> None:
    """Every dataset that generates with its default config, two tasks per seed."""
    report, dataset_of = _check(GENERATES_BY_DEFAULT, seed)
    assert report.checked == 2 * len(GENERATES_BY_DEFAULT) == 2 * (len(all_datasets()) - 1)
    failing = {dataset_of[f.task_id] for f in report.failures}
    assert failing == set(NOT_CHECKABLE) - {"composite"}, report.failures
    # the listed ones fail only because their entries carry no gold answer to replay
    assert all(f.policy == "reference" and f.reward == 0.0 for f in report.failures)
    for failure in report.failures:
        assert "no oracle answer" in NOT_CHECKABLE[dataset_of[failure.task_id]]


def test_default_selection_is_everything_checkable() -> None:
    assert default_datasets() == [n for n in all_datasets() if n not in NOT_CHECKABLE]
    assert len(all_datasets()) == 106 and len(default_datasets()) == 100
    env = envhub.make("reasoning_gym", size=1)
    assert len(asyncio.run(env.task_ids())) == 100


def test_composite_does_not_generate_without_its_config() -> None:
    with pytest.raises(InvalidRequest, match=r"composite.*Must specify at least one dataset"):
        asyncio.run(envhub.make("reasoning_gym", datasets="composite", size=1).task_ids())
    assert "needs a `datasets` config" in NOT_CHECKABLE["composite"]


def test_scoring_workers_run_under_bwrap() -> None:
    """With the bwrap backend the scoring workers run in bubblewrap: same verdicts."""
    if problem := bwrap_problem():
        if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bwrap required (ENVHUB_REQUIRE_BWRAP=1) but {problem}")
        pytest.skip(problem)
    report = check_environment("reasoning_gym", datasets="countdown,n_queens", sandbox="bwrap")
    assert report.checked == 20

"""Fixtures of the verifiers bridge's tests: the verifiers venv (``.ci/verifiers_setup.sh``)
and the tasksets written against verifiers' public API in ``vf_tasksets/``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from envhub_verifiers import VerifiersEnv, default_python

import envhub

TASKSETS = Path(__file__).with_name("vf_tasksets")


def verifiers_problem() -> str | None:
    """Why the bridge cannot run here (no verifiers venv), or None; with CI's
    ``ENVHUB_REQUIRE_VERIFIERS=1`` a missing venv fails instead of skipping."""
    if default_python().exists():
        return None
    problem = f"no verifiers venv at {default_python()}: run .ci/verifiers_setup.sh"
    if os.environ.get("ENVHUB_REQUIRE_VERIFIERS") == "1":
        pytest.fail(f"ENVHUB_REQUIRE_VERIFIERS=1 but {problem}")
    return problem


MakeEnv = Callable[..., envhub.LocalEnvironment]


@pytest.fixture(scope="session")
def make_env() -> MakeEnv:
    """``make_env(taskset, **options)``: the bridge over one of the test tasksets (one
    worker process per taskset and options, shared by every environment made so)."""

    def make(taskset: str, **options: object) -> envhub.LocalEnvironment:
        return envhub.make("verifiers", taskset=taskset, path=str(TASKSETS), **options)

    return make


@pytest.fixture(scope="session", autouse=True)
def _workers() -> Iterator[None]:
    """Skip without verifiers; stop the worker processes after the session (a worker
    imports verifiers, about 5 CPU-s: the modules share them, one per taskset)."""
    problem = verifiers_problem()
    if problem is not None:
        pytest.skip(problem)
    yield
    asyncio.run(VerifiersEnv.aclose_shared())

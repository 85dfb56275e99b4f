"""Fixtures of the envhub-rl-swe tests.

The docker tests need a Docker engine, the sandbox layer's ``python`` image and the
CI repositories' images (built here on first use, cached by content hash). Missing
Docker skips them, except when CI sets ``ENVHUB_REQUIRE_DOCKER=1``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator

import pytest

from envhub import StepResult
from envhub.sandboxes.docker_cli import run_docker
from envhub.testing import call_tool

CallTool = Callable[..., Awaitable[StepResult]]
#: the repositories (fastest suites) and tasks the CI subset uses
CI_REPOS = ("inflection", "cachetools")
CI_TASKS_PER_REPO = 5


def _docker_problem() -> str | None:
    from envhub.sandboxes.docker import docker_available
    from envhub.sandboxes.images import image_exists, image_tag

    if not docker_available():
        return "docker engine/CLI/SDK not available"
    if not image_exists(image_tag("python")):
        return "sandbox image 'python' not built (envhub sandbox build python)"
    return None


def _swe_containers() -> list[str]:
    """Containers of this process's SWE pools (labels set by the sandbox layer)."""
    out = run_docker(
        "ps", "-a", "--filter", f"label=envhub.owner.pid={os.getpid()}",
        "--format", '{{.Names}} {{.Label "envhub.pool"}}', check=True,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if " swe-" in line]


@pytest.fixture(scope="session", autouse=True)
def release_pools() -> Iterator[None]:
    """The test process owns the environments it makes, so it closes their pools (and
    sandbox directories) at the end: the pools register no exit hook."""
    yield
    from envhub.sandboxes import shared_pools as pools

    pools.shutdown("swe")


@pytest.fixture(scope="session")
def swe_images() -> Iterator[dict[str, str]]:
    """Docker ready and the CI repositories' images built; at the end of the session no
    container of ours may be left once the pools are shut down."""
    problem = _docker_problem()
    if problem is not None:
        if os.environ.get("ENVHUB_REQUIRE_DOCKER") == "1":
            pytest.fail(f"docker required (ENVHUB_REQUIRE_DOCKER=1) but {problem}")
        pytest.skip(problem)
    from envhub_swe.catalog import load_catalog
    from envhub_swe.images import build_image

    catalog = load_catalog()
    yield {name: build_image(catalog.get(name)) for name in CI_REPOS}
    from envhub.sandboxes import shared_pools as pools

    pools.shutdown("swe")
    assert _swe_containers() == []


@pytest.fixture(scope="session")
def ci_task_ids() -> list[str]:
    from envhub_swe.instances import load_instances

    ids: list[str] = []
    tasks = list(load_instances())
    for repo in CI_REPOS:
        ids += [t.id for t in tasks if t.metadata["repo"] == f"pypi/{repo}"][:CI_TASKS_PER_REPO]
    return ids


@pytest.fixture
def call() -> CallTool:
    """``await call(session, tool, **arguments)``: one turn with one tool call."""
    return call_tool

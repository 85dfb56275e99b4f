"""Fixtures of the envhub-rl-harbor tests.

Everything here runs under Docker (the ``docker`` xdist group: conftest.py at the
repository root); without an engine and envhub's ``python`` sandbox image the tests skip,
unless CI's ``ENVHUB_REQUIRE_DOCKER=1`` makes that a failure. Task images are content
tagged, so a warm run builds nothing.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.runtime.cache import cache_root
from envhub.sandboxes import shared_pools
from envhub.sandboxes.docker_cli import run_docker
from tests.images.conftest import docker_problem

TERMINAL_BENCH = "0.2.18"
_TEMPLATE_IN_WHEEL = "terminal_bench/cli/template-task/"


@pytest.fixture(scope="session")
def docker_ready() -> Iterator[None]:
    """Docker is there; at the end, the warm containers the tests' episodes left idle
    are removed (as ``LocalEnvironment.aclose`` removes them), and so is every container
    an episode released in the background."""
    problem = docker_problem()
    if problem is not None:
        pytest.skip(problem)
    yield
    shared_pools.shutdown("harbor")
    owned = f"label=envhub.owner.pid={os.getpid()}"
    left = run_docker("ps", "-aq", "--filter", "label=envhub.pool=harbor", "--filter", owned)
    left = left.stdout.split()
    assert not left, f"task containers left after shutdown: {left}"


def _wheels() -> Path:
    """Where .ci/harbor_setup.sh downloads the terminal-bench and pytest wheels."""
    wheels = cache_root("harbor") / "wheels"
    if not (wheels / f"terminal_bench-{TERMINAL_BENCH}-py3-none-any.whl").is_file():
        message = f"no terminal-bench wheel in {wheels}: run .ci/harbor_setup.sh"
        if os.environ.get("ENVHUB_REQUIRE_DOCKER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return wheels


@pytest.fixture(scope="session")
def tb_template() -> Path:
    """terminal-bench's task template, extracted from its wheel into the cache: the
    files ``tb tasks create`` copies into a new task (Dockerfile, docker-compose.yaml,
    run-tests.sh, solution.sh, solution.yaml, tests/test_outputs.py)."""
    wheel = _wheels() / f"terminal_bench-{TERMINAL_BENCH}-py3-none-any.whl"
    dest = cache_root("harbor") / f"terminal-bench-{TERMINAL_BENCH}-template"
    if not (dest / "Dockerfile").is_file():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.startswith(_TEMPLATE_IN_WHEEL) and not name.endswith("/"):
                    target = tmp / name.removeprefix(_TEMPLATE_IN_WHEEL)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    return dest


@pytest.fixture(scope="session")
def wheels_of_pytest() -> Path:
    wheels = _wheels() / "pytest"
    if not any(wheels.glob("pytest-*.whl")):
        pytest.fail(f"no pytest wheels in {wheels}: run .ci/harbor_setup.sh")
    return wheels

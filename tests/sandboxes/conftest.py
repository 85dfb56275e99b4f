"""Fixtures for the sandbox suites: which backends exist here, and leak checks.

Backends that are missing are skipped, except when CI sets ``ENVHUB_REQUIRE_DOCKER=1``
(or ``ENVHUB_REQUIRE_BWRAP=1``): then a missing engine is a failure, not a skip.
"""

from __future__ import annotations

import asyncio
import functools
import os

import pytest

from envhub.sandboxes import SandboxSpec
from envhub.sandboxes.bwrap import bwrap_problem

ISOLATED = ["bwrap", "docker"]
ALL = ["local", *ISOLATED]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "docker: needs a Docker engine and the base image")
    config.addinivalue_line("markers", "bwrap: needs bubblewrap")


@functools.cache
def _docker_problem() -> str | None:
    from envhub.sandboxes.docker import docker_available
    from envhub.sandboxes.images import image_exists, image_tag

    if not docker_available():
        return "docker engine/CLI/SDK not available"
    if not image_exists(image_tag("base")):
        return "sandbox image 'base' not built (run .ci/sandbox_setup.sh)"
    return None


_bwrap_problem = functools.cache(bwrap_problem)


def require_backend(name: str) -> None:
    """Skip (or fail, when CI requires it) if backend ``name`` cannot run here."""
    if name == "docker":
        problem, var = _docker_problem(), "ENVHUB_REQUIRE_DOCKER"
    elif name == "bwrap":
        problem, var = _bwrap_problem(), "ENVHUB_REQUIRE_BWRAP"
    else:
        return
    if problem is None:
        return
    if os.environ.get(var) == "1":
        pytest.fail(f"{name} required ({var}=1) but {problem}")
    pytest.skip(problem)


@pytest.fixture(params=ALL)
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture(params=ISOLATED)
def isolated_backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture
def spec() -> SandboxSpec:
    return SandboxSpec(image="base", memory="256MiB", pids=128, output_limit="64KiB")


def own_containers() -> list[str]:
    """Ids of envhub containers owned by this test process (empty if no docker)."""
    if _docker_problem() is not None:
        return []
    from envhub.sandboxes.docker import get_client

    client = get_client()
    found = client.api.containers(
        all=True, filters={"label": ["envhub.sandbox", f"envhub.owner.pid={os.getpid()}"]}
    )
    return [c["Id"][:12] for c in found]


@pytest.fixture(scope="session", autouse=True)
def no_leaked_containers():
    """After the whole run, no envhub-labelled container of ours may remain."""
    yield
    leaked = own_containers()
    if leaked:
        from envhub.sandboxes.gc import gc_containers

        gc_containers(all_=True)
        pytest.fail(f"leaked sandbox containers: {leaked}")


async def _host_sees(marker: str) -> bool:
    """Is a process whose command line contains ``marker`` alive on the host?"""

    def scan() -> bool:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if marker.encode() in f.read():
                            return True
                except OSError:
                    pass
        return False

    return await asyncio.to_thread(scan)


@pytest.fixture
def host_sees():
    """``await host_sees(marker)``: is a host process with ``marker`` in its argv alive?"""
    return _host_sees


@pytest.fixture
def require():
    """``require("docker")``: skip, or fail under ENVHUB_REQUIRE_*, if it is missing."""
    return require_backend


@pytest.fixture
def our_containers():
    """``our_containers()``: ids of envhub containers this test process still owns."""
    return own_containers

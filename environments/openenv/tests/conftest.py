"""The OpenEnv servers of these tests: ``openenv_servers.py`` run by OpenEnv's own code
(``openenv`` 0.10 from PyPI) in its own venv, made by ``.ci/openenv_setup.sh``.

Without that venv the tests skip, unless ``ENVHUB_REQUIRE_OPENENV=1`` (CI) makes that a
failure. The bridge starts each server itself (its ``command=`` option) once per test
process, when a test first needs it; tests that need a URL get the one it started
(``guess_url``). The modules run on one xdist worker (the ``openenv``
group of the root conftest.py), so a CI run starts each server once, plus the one
restart test_failures.py causes by killing ``guess``; test_image.py runs ``adder`` from
its image (``adder_image``), test_reverse.py runs OpenEnv's clients against envhub.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from envhub_openenv.servers import CommandServer, base_url, stop_servers

from envhub.sandboxes.docker import docker_available
from environments.openenv.tests.openenv_image import build_adder_image
from tests.bridges import OPENENV_PYTHON  # ENVHUB_OPENENV_PYTHON or .venv-openenv
from tests.rollout.conftest import scripted  # noqa: F401 - the scripted model server

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "openenv_servers.py"
GUESS_TASKS = HERE / "guess.jsonl"
ADDER_TASKS = HERE / "adder.jsonl"
STARTUP_S = 120.0  # seconds for a server to start, on a loaded 2-core machine


@pytest.fixture(scope="session")
def openenv_interpreter() -> Path:
    """The OpenEnv venv's python, for scripts that run OpenEnv's own clients."""
    return OPENENV_PYTHON


def _command(kind: str) -> list[str]:
    return [str(OPENENV_PYTHON), str(SERVERS), kind, "--port", "{port}"]


@pytest.fixture(scope="session")
def guess_command() -> list[str]:
    """The command that serves the ``guess`` environment on ``{port}``."""
    return _command("guess")


@pytest.fixture(scope="session")
def adder_command() -> list[str]:
    """The command that serves the ``adder`` (MCP) environment on ``{port}``."""
    return _command("adder")


@pytest.fixture
def guess_url(guess_command: list[str]) -> str:
    """The ``guess`` server the bridge started (as ``command=`` environments share it),
    asked per test: test_failures.py kills it, and the bridge starts it again."""
    return base_url(CommandServer(tuple(guess_command)), STARTUP_S)


@pytest.fixture(scope="session")
def adder_image() -> str:
    """The OpenEnv server image of ``adder`` (:mod:`openenv_image`; CI builds it in the
    background of its setup, so this finds the tag)."""
    if not docker_available():
        if os.environ.get("ENVHUB_REQUIRE_DOCKER") == "1":
            pytest.fail("ENVHUB_REQUIRE_DOCKER=1 but no Docker engine")
        pytest.skip("needs a Docker engine")
    return build_adder_image(OPENENV_PYTHON)


@pytest.fixture(scope="session", autouse=True)
def _openenv_venv() -> Iterator[None]:
    """Skip without the OpenEnv venv; stop the servers the bridge started, at the end."""
    if not OPENENV_PYTHON.exists():
        if os.environ.get("ENVHUB_REQUIRE_OPENENV") == "1":
            pytest.fail(f"ENVHUB_REQUIRE_OPENENV=1 but {OPENENV_PYTHON} is missing "
                        "(bash .ci/openenv_setup.sh)")
        pytest.skip("needs the OpenEnv venv: bash .ci/openenv_setup.sh")
    yield
    stop_servers()


"""Environment images built once per session (calc, sql, search) and one container of
each, for the tests in this folder.

Building needs the docker engine and the ``python`` sandbox image (``.ci/sandbox_setup.sh``
builds it); without them the tests skip, unless ``ENVHUB_REQUIRE_DOCKER=1`` (CI) makes
that a failure. Images are content-tagged, so a session after an unchanged one builds
nothing; ``.ci/images_setup.sh`` prebuilds them in CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from envhub.environment_images.run import Container

IMAGE_ENVS = ("calc", "sql", "search")
TOKEN = "image-test-token"


def docker_problem() -> str | None:
    """Why environment images cannot be built here (None: they can); fails instead of
    skipping under ``ENVHUB_REQUIRE_DOCKER=1``."""
    from envhub.sandboxes.docker import docker_available
    from envhub.sandboxes.images import image_exists, image_tag

    if not docker_available():
        problem = "docker engine/CLI/SDK not available"
    elif not image_exists(image_tag("python")):
        problem = "sandbox image 'python' not built (envhub sandbox build python)"
    else:
        return None
    if os.environ.get("ENVHUB_REQUIRE_DOCKER") == "1":
        pytest.fail(f"docker required (ENVHUB_REQUIRE_DOCKER=1) but {problem}")
    return problem


@pytest.fixture(scope="session")
def env_images() -> dict[str, str]:
    """``{env: tag}`` for calc, sql and search (built if missing)."""
    if (problem := docker_problem()) is not None:
        pytest.skip(problem)
    from envhub.environment_images import build_env_image

    return {env: build_env_image(env) for env in IMAGE_ENVS}


@pytest.fixture(scope="session")
def containers(env_images: dict[str, str]) -> Iterator[dict[str, Container]]:
    """One running container per image, token-protected, published on 127.0.0.1."""
    from envhub.environment_images.run import start_container, stop_container

    started: dict[str, Container] = {}
    try:
        for env, tag in env_images.items():
            started[env] = start_container(tag, token=TOKEN)
        yield started
    finally:
        for container in started.values():
            stop_container(container.id)

"""A docker image tag nobody has built yet, wanted at once by threads and processes, is
built once (envhub.sandboxes.images.build_image_once); the others wait and find it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from envhub.sandboxes.docker_cli import run_docker
from envhub.sandboxes.images import image_exists, image_tag
from envhub.testing import first_uses_at_once

_SCRIPT = """
import subprocess, time
from envhub.sandboxes.images import build_image_once, image_exists

def build() -> None:
    with open({builds!r}, "a") as fh:
        fh.write("build\\n")
    time.sleep(0.5)  # a slower build widens the window a missing lock would show in
    subprocess.run(["docker", "build", "-q", "-t", {tag!r}, {context!r}], check=True,
                   capture_output=True)

def first_use() -> None:
    assert build_image_once({tag!r}, build) == {tag!r}
    assert image_exists({tag!r})
"""


def test_a_cold_tag_is_built_once(
    require, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("docker")
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path / "cache"))  # lock files, for all of us
    nonce = uuid.uuid4().hex[:12]
    tag = f"envhub/test-build-once:{nonce}"
    context = tmp_path / "context"
    context.mkdir()
    # the cheapest image: one label on the base image, so each run's tag is new
    (context / "Dockerfile").write_text(
        f'FROM {image_tag("base")}\nLABEL envhub.test.nonce="{nonce}"\n'
    )
    builds = tmp_path / "builds"
    script = _SCRIPT.format(builds=str(builds), tag=tag, context=str(context))
    namespace: dict[str, object] = {}
    exec(script, namespace)
    try:
        first_uses_at_once(namespace["first_use"], script, threads=3, processes=3)  # type: ignore[arg-type]
        assert builds.read_text().splitlines() == ["build"]
        assert image_exists(tag)
    finally:
        run_docker("rmi", "-f", tag)

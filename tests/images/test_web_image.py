"""The web environment's image: text mode passes ``envhub check`` through the container,
and browser mode runs an episode with the Chromium installed in the image (Debian's, from
the ``chromium`` sandbox image)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.sandboxes.docker_cli import run_docker
from tests.images.conftest import TOKEN, docker_problem


@pytest.fixture(scope="module")
def web_image() -> str:
    from envhub.sandboxes.images import image_exists, image_tag

    if (problem := docker_problem()) is not None:
        pytest.skip(problem)
    if not image_exists(image_tag("chromium")):
        if os.environ.get("ENVHUB_REQUIRE_WEB_IMAGE") == "1":
            pytest.fail("ENVHUB_REQUIRE_WEB_IMAGE=1 but the chromium sandbox image is not built")
        pytest.skip("sandbox image 'chromium' not built (envhub sandbox build chromium)")
    from envhub.environment_images import build_env_image

    return build_env_image("web")


def test_web_image_checks_in_text_mode_and_runs_browser_mode(web_image: str) -> None:
    from envhub.environment_images.run import start_container, stop_container

    text = start_container(web_image, token=TOKEN, args=["--env-arg", "mode=text"])
    try:
        runner = CliRunner()
        args = ["check", "web", "--env-url", text.url, "--env-token", TOKEN]
        result = runner.invoke(app, [*args, "--tasks", "0:4"])
        assert result.exit_code == 0, result.output
        assert "ok: 4 tasks" in result.output
    finally:
        stop_container(text.id)
    browser = start_container(web_image, token=TOKEN)  # browser mode: Chromium is in the image
    try:
        args = ["check", "web", "--env-url", browser.url, "--env-token", TOKEN]
        result = CliRunner().invoke(app, [*args, "--tasks", "0:1"])
        assert result.exit_code == 0, result.output
        assert "ok: 1 tasks" in result.output
        processes = run_docker("top", browser.id, check=True).stdout
        assert "chromium" in processes  # the episode drove the image's own browser
    finally:
        stop_container(browser.id)

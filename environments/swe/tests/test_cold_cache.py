"""A fresh machine: episodes that start together on an empty SWE cache build each host
artefact (sdist, wheels, git repository, venv, ``--target`` deps tree, repository image)
once, from threads and from processes, and then run. Each test has its own empty
``ENVHUB_SWE_CACHE``; inflection is the smallest CI repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.sandboxes.docker_cli import run_docker
from envhub.testing import check_environment, first_uses_at_once

#: which builder command makes which artefact (the commands envhub_swe.build runs)
_SCRIPT = """
import subprocess
from pathlib import Path

from envhub_swe import build
from envhub_swe.catalog import load_catalog

KINDS = {{"--no-binary": "sdist", "--only-binary": "wheels", "init": "repo", "venv": "venv",
          "--target": "deps"}}
_run = build._run

def _counted(cmd, *args, **kwargs):  # the real commands, counted
    for marker, kind in KINDS.items():
        if marker in cmd:
            with open({builds!r}, "a") as fh:
                fh.write(kind + "\\n")
    return _run(cmd, *args, **kwargs)

build._run = _counted

def first_use() -> None:
    repo = load_catalog().get("inflection")
    host, upload = build.host_layout(repo), build.upload_layout(repo)
    assert host.repo_dir == upload.repo_dir
    assert build.base_commit(repo) == {commit!r}
    subprocess.run([host.python, "-c", "import pytest"], check=True)
    assert (Path(upload.deps) / "pytest").is_dir()
"""


@pytest.fixture
def cold_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SWE cache for this test, its threads and its processes."""
    cache = tmp_path / "swe-cache"
    monkeypatch.setenv("ENVHUB_SWE_CACHE", str(cache))
    return cache


def _inflection_ids(ci_task_ids: list[str]) -> list[str]:
    from envhub_swe.instances import load_instances

    inflection = {t.id for t in load_instances() if t.metadata["repo"] == "pypi/inflection"}
    return [i for i in ci_task_ids if i in inflection][:2]


def test_episodes_start_together_on_a_cold_cache(cold_cache: Path, ci_task_ids: list[str]) -> None:
    """The CI failure on a fresh machine: two local episodes at once, nothing built yet."""
    ids = _inflection_ids(ci_task_ids)
    report = check_environment("swe", task_ids=ids, sandbox="local", concurrency=2)
    assert report.checked == len(ids) == 2


def test_host_artefacts_are_built_once(
    cold_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci_task_ids: list[str]
) -> None:
    from envhub_swe import build
    from envhub_swe.instances import load_instances

    (task,) = [t for t in load_instances() if t.id == _inflection_ids(ci_task_ids)[0]]
    builds = tmp_path / "builds"
    # the pristine commit, reproducible from the sdist alone (SWE-bench's setup commit)
    script = _SCRIPT.format(builds=str(builds), commit=task.metadata["environment_setup_commit"])
    monkeypatch.setattr(build, "_run", build._run)  # restored after the test
    namespace: dict[str, object] = {}
    exec(script, namespace)
    first_uses_at_once(namespace["first_use"], script, threads=3, processes=3)  # type: ignore[arg-type]
    assert sorted(builds.read_text().splitlines()) == ["deps", "repo", "sdist", "venv", "wheels"]


_IMAGE_SCRIPT = """
from envhub_swe import images
from envhub_swe.catalog import load_catalog

images._BUILDER_VERSION = {version!r}  # a tag no machine has built
_build = images._build

def _counted(repo, tag):  # the real build, counted
    with open({builds!r}, "a") as fh:
        fh.write(tag + "\\n")
    _build(repo, tag)

images._build = _counted

def first_use() -> None:
    assert images.ensure_image(load_catalog().get("inflection")).endswith({suffix!r})
"""


def test_repository_image_is_built_once(
    swe_images: dict[str, str], cold_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository image under a tag that no one has built yet (docker)."""
    from envhub_swe import images
    from envhub_swe.catalog import load_catalog

    version = f"cold-{tmp_path.name}"
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path / "cache"))  # the image's lock file
    monkeypatch.setattr(images, "_BUILDER_VERSION", version)
    monkeypatch.setattr(images, "_build", images._build)
    tag = images.image_name(load_catalog().get("inflection"))
    builds = tmp_path / "builds"
    script = _IMAGE_SCRIPT.format(version=version, builds=str(builds), suffix=tag[-12:])
    namespace: dict[str, object] = {}
    exec(script, namespace)
    try:
        first_uses_at_once(namespace["first_use"], script, threads=2, processes=2)  # type: ignore[arg-type]
        assert builds.read_text().splitlines() == [tag]
    finally:
        run_docker("rmi", "-f", tag)

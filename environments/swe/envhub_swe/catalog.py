"""The repository catalog (``data/catalog.yaml``) and where a repository lives.

A :class:`RepoSpec` pins one PyPI sdist and says how its tests run. A :class:`Layout`
says where the pristine repository and the Python that runs its tests are inside a
sandbox: in a repository image they are ``/opt/repo`` and ``/opt/venv``; for the
``local`` backend they are the builder's host cache.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

from envhub.errors import InvalidRequest
from envhub.runtime.cache import cache_root as envhub_cache_root

__all__ = ["Catalog", "Layout", "RepoSpec", "cache_root", "load_catalog"]


class RepoSpec(BaseModel):
    """One repository: a pinned sdist plus how to run and mutate it."""

    name: str
    version: str
    sha256: str
    python_path: str = "."
    tests: list[str]
    sources: list[str]
    exclude: list[str] = Field(default_factory=list)

    @property
    def key(self) -> str:
        """``name-version``: the directory and image name part."""
        return f"{self.name}-{self.version}"

    @property
    def repo_id(self) -> str:
        """The SWE-bench ``repo`` field (``pypi/<name>``: there is no GitHub repository)."""
        return f"pypi/{self.name}"

    def is_test_file(self, path: str) -> bool:
        """Test files are reset before grading: the agent cannot pass by editing them."""
        return is_test_path(path) or any(
            path == t or path.startswith(t.rstrip("/") + "/") for t in self.tests
        )


def is_test_path(path: str) -> bool:
    """pytest's own conventions (and ``conftest.py``), for repositories without a spec."""
    parts = Path(path).parts
    name = parts[-1] if parts else ""
    return (
        any(p in ("tests", "test", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


class Catalog(BaseModel):
    test_requirements: list[str]
    repos: list[RepoSpec]

    def get(self, name: str) -> RepoSpec:
        for repo in self.repos:
            if repo.name == name:
                return repo
        known = ", ".join(r.name for r in self.repos)
        raise InvalidRequest(f"no repository {name!r} in the SWE catalog; known: {known}")


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    text = resources.files("envhub_swe").joinpath("data/catalog.yaml").read_text("utf-8")
    return Catalog.model_validate(yaml.safe_load(text))


def cache_root() -> Path:
    """Where the builder keeps sdists, wheels, git repositories and host venvs:
    ``$ENVHUB_SWE_CACHE``, else ``swe/`` in envhub's cache
    (:func:`envhub.runtime.cache.cache_root`)."""
    env = os.environ.get("ENVHUB_SWE_CACHE")
    return Path(env) if env else envhub_cache_root("swe")


#: where the upload layout puts the test requirements inside the sandbox
DEPS_DIR = "/tmp/envhub-deps"


@dataclass(frozen=True)
class Layout:
    """Where the repository and the Python that runs its tests are.

    Image layout (docker, SWE-bench images): ``repo_dir`` and ``venv`` are paths inside
    the sandbox and the checkout is a copy. Upload layout (bwrap on a host without
    repository images): ``repo_dir`` and ``deps`` are host directories uploaded into
    each sandbox, and the sandbox's own ``python3`` runs the tests.
    """

    repo_dir: str  # the pristine repository (git, at the base commit)
    venv: str | None = None  # a virtualenv with the test requirements, inside the sandbox
    deps: str | None = None  # host dir with the test requirements (pip --target), uploaded
    uploaded: bool = False  # repo_dir is a host directory to upload

    @property
    def python(self) -> str:
        return f"{self.venv}/bin/python" if self.venv else "python3"

    def env(self, repo: RepoSpec, workdir: str) -> dict[str, str]:
        """Environment of every command: the venv first on PATH, the package importable."""
        root = workdir if workdir.startswith("/") else "."
        path = root if repo.python_path == "." else f"{root}/{repo.python_path}"
        if self.deps:
            path += f":{DEPS_DIR}"
        bin_path = "/usr/local/bin:/usr/bin:/bin"
        return {
            "PATH": f"{self.venv}/bin:{bin_path}" if self.venv else bin_path,
            "PYTHONPATH": path,
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_PAGER": "cat",
            "PAGER": "cat",
        }


#: inside a repository image
IMAGE_LAYOUT = Layout(repo_dir="/opt/repo", venv="/opt/venv")
#: SWE-bench's instance images (``sweb.eval.*``)
SWEBENCH_LAYOUT = Layout(repo_dir="/testbed", venv="/opt/miniconda3/envs/testbed")

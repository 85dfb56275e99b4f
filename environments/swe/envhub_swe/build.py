"""The builder: pinned sdist -> git repository at a reproducible base commit -> venv/image.

Everything lands in :func:`~envhub_swe.catalog.cache_root`, each artefact built once
(across threads and processes, see :func:`envhub.runtime.cache.build_once`) and reused after:

- ``sdists/<name-version>/<file>``: downloaded with ``pip download --no-binary :all:``,
  sha256-checked;
- ``wheels/``: the test requirements as wheels (fetched on the host, which reaches
  PyPI; sandboxes have no network and install from here with ``--no-index``);
- ``repos/<name-version>/``: the unpacked sdist committed as the only commit, with a
  fixed author and date, so the base commit hash depends on the content alone;
- ``venv/``: a host virtualenv with the test requirements (the ``local`` backend);
- a docker image per repository (:mod:`envhub_swe.images`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from envhub.errors import SandboxError
from envhub.runtime.cache import build_once
from envhub_swe.catalog import Layout, RepoSpec, cache_root, load_catalog

__all__ = [
    "base_commit",
    "fetch_wheels",
    "host_layout",
    "prepare_deps",
    "prepare_repo",
    "prepare_venv",
    "upload_layout",
]

#: a fixed identity and date, so the same tree always gives the same commit hash
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "envhub",
    "GIT_AUTHOR_EMAIL": "envhub@localhost",
    "GIT_COMMITTER_NAME": "envhub",
    "GIT_COMMITTER_EMAIL": "envhub@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
#: the host's git configuration must not change the commit either
_GIT_ENV = {**GIT_IDENTITY, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SandboxError(f"{' '.join(cmd[:4])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist(repo: RepoSpec) -> Path:
    """The repository's sdist (``sdists/<name-version>/<file>``), downloaded once and
    checked against the pinned sha256."""

    def download(dest: Path) -> None:
        _run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", f"{repo.name}=={repo.version}", "-d", str(dest)]
        )  # fmt: skip
        if not [p for p in dest.glob("*.tar.gz") if _sha256(p) == repo.sha256]:
            raise SandboxError(
                f"no sdist of {repo.name}=={repo.version} matches sha256 {repo.sha256}"
            )

    dest = build_once(cache_root() / "sdists" / repo.key, download, stamp=repo.sha256)
    (sdist,) = dest.glob("*.tar.gz")
    return sdist


def prepare_repo(repo: RepoSpec) -> Path:
    """The git repository of ``repo`` (``repos/<name-version>/``, built on first use)."""

    def commit_sdist(target: Path) -> None:
        unpacked = target.parent / "unpacked"
        with tarfile.open(fetch_sdist(repo)) as tar:
            tar.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()  # an sdist has exactly one top-level directory
        _run(["git", "init", "-q", "-b", "main"], cwd=top, env=_GIT_ENV)
        _run(["git", "add", "-A", "-f"], cwd=top, env=_GIT_ENV)
        _run(
            ["git", "commit", "-q", "-m", f"{repo.name} {repo.version} sdist"],
            cwd=top,
            env=_GIT_ENV,
        )
        top.rename(target)

    return build_once(cache_root() / "repos" / repo.key, commit_sdist, stamp=repo.sha256)


def base_commit(repo: RepoSpec) -> str:
    return _run(["git", "rev-parse", "HEAD"], cwd=prepare_repo(repo), env=_GIT_ENV).strip()


def _requirements_stamp() -> str:
    """What an installed requirements tree depends on: the pins and the host Python."""
    return "\n".join([sys.version, *load_catalog().test_requirements])


def fetch_wheels() -> Path:
    """The catalog's test requirements as wheels, for offline installs."""
    reqs = load_catalog().test_requirements

    def download(dest: Path) -> None:
        _run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary", ":all:", "--python-version", "3.11", "-d", str(dest), *reqs]
        )  # fmt: skip

    return build_once(cache_root() / "wheels", download, stamp="\n".join(reqs))


def _retarget_scripts(venv: Path, final: Path) -> None:
    """pip writes the venv's absolute path into its scripts (shebangs, ``activate``); the
    venv is built at a temporary path, so point them at the path it is renamed to."""
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if str(venv).encode() in data and b"\0" not in data:
                script.write_bytes(data.replace(str(venv).encode(), str(final).encode()))


def prepare_venv() -> Path:
    """A host venv with the test requirements (for the ``local`` backend)."""
    final = cache_root() / "venv"

    def install(venv: Path) -> None:
        _run([sys.executable, "-m", "venv", str(venv)])
        _run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
             "--find-links", str(fetch_wheels()), *load_catalog().test_requirements]
        )  # fmt: skip
        _retarget_scripts(venv, final)

    return build_once(final, install, stamp=_requirements_stamp())


def prepare_deps() -> Path:
    """The test requirements unpacked into one directory (``pip install --target``),
    uploaded into bwrap sandboxes and put on their ``PYTHONPATH``."""

    def install(deps: Path) -> None:
        _run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-compile",
             "--find-links", str(fetch_wheels()), "--target", str(deps),
             *load_catalog().test_requirements]
        )  # fmt: skip

    return build_once(cache_root() / "deps", install, stamp=_requirements_stamp())


def upload_layout(repo: RepoSpec) -> Layout:
    """What bwrap sandboxes use: repository and requirements copied in per episode."""
    return Layout(repo_dir=str(prepare_repo(repo)), deps=str(prepare_deps()), uploaded=True)


def host_layout(repo: RepoSpec) -> Layout:
    """Where ``repo`` lives for the ``local`` backend (built on first use)."""
    return Layout(repo_dir=str(prepare_repo(repo)), venv=str(prepare_venv()))

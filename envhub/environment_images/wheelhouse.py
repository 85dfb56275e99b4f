"""The Python half of an image, prepared on the host: source trees and wheels.

``docker build`` runs without network here, so everything pip installs in an image is a
wheel made on the host (which reaches PyPI) and installed with ``--no-index``. envhub and
the plugin are built from their source checkouts (editable installs), copied clean
first so stale ``build/`` or ``__pycache__`` files never reach a wheel; their
dependencies come from PyPI once and are kept in ``$ENVHUB_CACHE/images/wheels``, so later
builds work offline. Requirements are read from the installed distributions' metadata
(never resolved by name against PyPI: the core's is ``envhub-rl``, since another project
owns ``envhub`` there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envhub._util.clean_copy import clean_copy
from envhub.errors import EnvhubError, RegistryError
from envhub.registry import CORE_DISTRIBUTION, ENTRY_POINT_GROUP
from envhub.runtime.cache import cache_root

__all__ = ["Source", "build_wheels", "envhub_source", "plugin_source"]

_REPRODUCIBLE = {"SOURCE_DATE_EPOCH": "315532800"}  # fixed zip timestamps in our wheels


@dataclass(frozen=True)
class Source:
    """A distribution to put in an image: its name, version, source checkout, the top-level
    paths of that checkout that make up the package, and its requirements."""

    name: str
    version: str
    root: Path
    paths: tuple[str, ...]
    requires: tuple[str, ...]

    def copy_to(self, dest: Path) -> Path:
        """A clean copy of the package's files under ``dest`` (created); returns it."""
        dest.mkdir(parents=True)
        for rel in self.paths:
            src = self.root / rel
            if src.is_dir():
                clean_copy(src, dest / rel)
            elif src.is_file():
                shutil.copy2(src, dest / rel)
        return dest


def _requirements(dist_name: str, extras: Iterable[str]) -> tuple[str, ...]:
    """``dist_name``'s requirements with these extras, markers evaluated for this Python."""
    wanted = set(extras) | {""}
    out = []
    for line in distribution(dist_name).requires or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted):
            req.marker = None
            out.append(str(req))
    return tuple(out)


def envhub_source(extras: Iterable[str] = ("server",)) -> Source:
    """envhub's own checkout (the one this process imports), with ``extras``."""
    import envhub

    root = Path(envhub.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        raise EnvhubError(
            f"envhub image build needs envhub installed from a source checkout "
            f"(pip install -e); {root} has no pyproject.toml"
        )
    from setuptools.config.pyprojecttoml import read_configuration  # type: ignore[import-untyped]

    meta = read_configuration(pyproject, expand=False)
    package_dirs = meta.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    # VERSION: the pyproject reads its version from it
    paths = {"pyproject.toml", "README.md", "LICENSE", "VERSION", *package_dirs.values()}
    version = distribution(CORE_DISTRIBUTION).version
    requires = _requirements(CORE_DISTRIBUTION, extras)
    return Source(CORE_DISTRIBUTION, version, root, tuple(sorted(paths)), requires)


def _envhub_extra_requirements(extras: Iterable[str]) -> list[str]:
    """What envhub's ``extras`` add to it, read from the checkout's ``pyproject.toml``: the
    runtime image's envhub is built from that file (an editable install's metadata may be
    older), markers evaluated for this Python."""
    from setuptools.config.pyprojecttoml import read_configuration

    import envhub

    pyproject = Path(envhub.__file__).resolve().parent.parent / "pyproject.toml"
    meta = read_configuration(pyproject, expand=False)
    optional = meta["project"].get("optional-dependencies", {})
    out: list[str] = []
    for line in (line for extra in extras for line in optional.get(extra, [])):
        req = Requirement(line)
        if canonicalize_name(req.name) == CORE_DISTRIBUTION:  # an extra of others (``all``)
            out += _envhub_extra_requirements(req.extras)
        elif req.marker is None or req.marker.evaluate():
            req.marker = None
            out.append(str(req))
    return out


def plugin_source(env: str, extras: Iterable[str] = ()) -> Source:
    """The source checkout of the distribution that registers environment ``env``."""
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == env]
    if not matches or matches[0].dist is None:
        raise RegistryError(f"no installed plugin registers environment {env!r}")
    dist_name = matches[0].dist.name
    try:
        direct = json.loads(distribution(dist_name).read_text("direct_url.json") or "{}")
    except PackageNotFoundError:
        direct = {}
    url = str(direct.get("url", ""))
    if not url.startswith("file://"):
        raise EnvhubError(
            f"{dist_name} was not installed from a local checkout (pip install -e DIR); "
            "envhub image build builds the plugin's wheel from its source"
        )
    root = Path(url.removeprefix("file://"))
    paths = tuple(sorted(p.name for p in root.iterdir() if not p.name.startswith(".")))
    requires: list[str] = []
    for line in _requirements(dist_name, extras):
        req = Requirement(line)
        if canonicalize_name(req.name) != CORE_DISTRIBUTION:
            requires.append(line)
        else:  # envhub is in the runtime image; the extras it asks for (its [docker]) not
            requires += _envhub_extra_requirements(req.extras)
    version = distribution(dist_name).version
    return Source(dist_name, version, root, paths, tuple(dict.fromkeys(requires)))


def _pip_wheel(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_REPRODUCIBLE, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", *args],
        env=env, capture_output=True, text=True,
    )  # fmt: skip


def build_wheels(source_copy: Path, requires: Iterable[str], out: Path) -> None:
    """Wheels for ``requires`` (with their dependencies) and for the package at
    ``source_copy`` (without) into ``out``. Requirements come from the local wheel cache
    alone when it has them all, else from PyPI; new wheels are added to the cache."""
    out.mkdir(parents=True, exist_ok=True)
    if reqs := list(requires):
        cached = cache_root("images") / "wheels"
        cached.mkdir(parents=True, exist_ok=True)
        common = ["-w", str(out), "--find-links", str(cached), *reqs]
        if _pip_wheel(["--no-index", *common]).returncode != 0:
            proc = _pip_wheel(common)
            if proc.returncode != 0:
                raise EnvhubError(f"pip wheel of {', '.join(reqs)} failed: {proc.stderr[-2000:]}")
        for wheel in out.glob("*.whl"):
            if not (cached / wheel.name).exists():
                shutil.copy2(wheel, cached / wheel.name)
    proc = _pip_wheel(["--no-deps", "--no-build-isolation", "-w", str(out), str(source_copy)])
    if proc.returncode != 0:
        raise EnvhubError(f"pip wheel {source_copy.name} failed: {proc.stderr[-2000:]}")

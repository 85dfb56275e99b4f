"""One docker image per repository, built ``FROM`` the sandbox layer's ``python`` image.

Layers: the test requirements installed offline into ``/opt/venv`` (identical for every
repository, so docker shares the layer), then the git repository at ``/opt/repo``
(owned by the sandbox user, which copies it into its tmpfs workdir per episode).
The tag is a content hash of everything that goes in, so an unchanged repository is
never rebuilt and a changed one gets a new tag::

    envhub/swe-toolz-1.2.0:<hash>
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from envhub.errors import SandboxError
from envhub.sandboxes.docker_cli import run_docker
from envhub.sandboxes.images import build_image_once, image_exists
from envhub_swe.build import base_commit, fetch_wheels, prepare_repo
from envhub_swe.catalog import IMAGE_LAYOUT, RepoSpec, load_catalog

__all__ = ["build_image", "ensure_image", "image_name"]

_BUILDER_VERSION = "1"

_DOCKERFILE = """\
FROM {base}
USER root
COPY wheels /tmp/wheels
RUN python3 -m venv {venv} \\
 && {venv}/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels {reqs}
COPY --chown=1000:1000 repo {repo_dir}
USER 1000:1000
LABEL envhub.swe.repo="{name}" envhub.swe.base_commit="{commit}"
"""


def _python_image() -> str:
    from envhub.sandboxes.images import resolve_image

    return resolve_image("python")


def image_name(repo: RepoSpec) -> str:
    """The content-addressed tag of ``repo``'s image (what tasks record as ``image``)."""
    h = hashlib.sha256(f"envhub-swe-image:{_BUILDER_VERSION}\n".encode())
    h.update(_python_image().encode())
    h.update("\n".join(load_catalog().test_requirements).encode())
    h.update(f"{repo.key}:{repo.sha256}".encode())
    return f"envhub/swe-{repo.key}:{h.hexdigest()[:12]}"


def build_image(repo: RepoSpec, *, force: bool = False) -> str:
    """Build (or find) ``repo``'s image; returns its tag. Concurrent first uses, in
    threads or processes, build it once (:func:`envhub.sandboxes.images.build_image_once`)."""
    tag = image_name(repo)
    return build_image_once(tag, lambda: _build(repo, tag), force=force)


def _build(repo: RepoSpec, tag: str) -> None:
    base = _python_image()
    if not image_exists(base):
        raise SandboxError(f"base image {base} missing: run `envhub sandbox build python` first")
    reqs = load_catalog().test_requirements
    with tempfile.TemporaryDirectory(prefix="envhub-swe-image-") as tmp:
        ctx = Path(tmp)
        shutil.copytree(fetch_wheels(), ctx / "wheels")
        shutil.copytree(prepare_repo(repo), ctx / "repo", symlinks=True)
        (ctx / "Dockerfile").write_text(
            _DOCKERFILE.format(
                base=base,
                venv=IMAGE_LAYOUT.venv,
                repo_dir=IMAGE_LAYOUT.repo_dir,
                reqs=" ".join(reqs),
                name=repo.name,
                commit=base_commit(repo),
            )
        )
        # no registry and no network: the legacy builder with networking off
        proc = run_docker("build", "--network", "none", "--force-rm", "-q", "-t", tag, str(ctx))
    if proc.returncode != 0:
        raise SandboxError(f"docker build of {tag} failed: {proc.stderr[-3000:]}")


_built: set[str] = set()


def ensure_image(repo: RepoSpec) -> str:
    """``repo``'s image, built on first use (checked once per process; blocking: call it
    in a thread). So ``envhub check swe`` works after ``envhub sandbox build python`` alone."""
    tag = image_name(repo)
    if tag not in _built:
        build_image(repo)
        _built.add(tag)
    return tag

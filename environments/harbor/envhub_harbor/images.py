"""Each task's image, built once per content with envhub's image machinery.

Harbor runs ``docker compose build`` on ``environment/``; here the same Dockerfile is
built by ``docker build --network none`` into ``envhub/harbor-<task>:<hash>`` through
:func:`envhub.sandboxes.images.build_image_once` (the lock and the exists-check every
envhub image build goes through), so a second episode, process or test finds the tag
and builds nothing. The hash covers the build context, the base images it starts from
after mapping, and this builder's version: a changed task gets a new tag.

No registry is reachable on envhub's machines, so a ``FROM`` naming an image that is not
present locally is rewritten through the operator's base-image map (``ubuntu:24.04`` to
envhub's ``python`` sandbox image, by default; :data:`DEFAULT_BASE_IMAGES`). A
``FROM`` that is neither local nor mapped, or a Dockerfile whose build fails, raises
:class:`TaskBuildError`: a broken task is a configuration error shown to the operator,
never an episode masked as if the machine had failed.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from envhub.errors import InvalidRequest
from envhub.sandboxes.docker_cli import run_docker
from envhub.sandboxes.images import build_image_once, image_exists, resolve_image, tree_digest
from envhub_harbor.taskdir import HarborTask

__all__ = ["DEFAULT_BASE_IMAGES", "TaskBuildError", "ensure_image", "parse_base_images"]

_BUILDER_VERSION = "1"
#: the bases Harbor's and Terminal-Bench's task templates start from, as envhub's local
#: images: Debian bookworm with python3 ("python") is not the same distribution, so a
#: task needing more than a shell and python3 names its own image with ``base_images``
DEFAULT_BASE_IMAGES: dict[str, str] = {
    "ubuntu:24.04": "python",
    "ubuntu:22.04": "python",
    "debian:bookworm": "python",
    "debian:bookworm-slim": "python",
    "python:3.11-slim": "python",
    "python:3.12-slim": "python",
    "python:3.13-slim": "python",
    "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624": "python",
    "ghcr.io/laude-institute/t-bench/python-3-13:20250620": "python",
}
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE | re.MULTILINE)


class TaskBuildError(InvalidRequest):
    """A task's image cannot be built: its Dockerfile fails, times out, or starts from
    an image that is neither local nor mapped. The task is broken (or needs an operator
    option), so this is a request error, not an infrastructure failure to mask."""

    code = "task_build_failed"


def parse_base_images(spec: str | Mapping[str, str] | None) -> dict[str, str]:
    """``"ref=local,ref=local"`` (or a mapping) over :data:`DEFAULT_BASE_IMAGES`."""
    out = dict(DEFAULT_BASE_IMAGES)
    if spec is None or spec == "":
        return out
    if isinstance(spec, Mapping):
        out.update({str(k): str(v) for k, v in spec.items()})
        return out
    for item in spec.split(","):
        ref, sep, local = item.strip().partition("=")
        if not sep or not ref.strip() or not local.strip():
            raise InvalidRequest(f"base_images takes REF=LOCAL[,REF=LOCAL...], not {item!r}")
        out[ref.strip()] = local.strip()
    return out


def _rewrite(dockerfile: str, base_images: Mapping[str, str], task: str) -> tuple[str, list[str]]:
    """The Dockerfile with each ``FROM`` made local, and the resolved bases."""
    stages: set[str] = set()
    bases: list[str] = []

    def one(m: re.Match[str]) -> str:
        ref = m.group(3)
        alias = re.search(r"\s+AS\s+(\S+)", m.group(4), re.IGNORECASE)
        if alias:
            stages.add(alias.group(1))
        if ref in stages or ref == "scratch":  # an earlier stage of the same build
            return m.group(0)
        local = ref
        if not image_exists(ref):
            if ref not in base_images:
                raise TaskBuildError(
                    f"task {task}: base image {ref} is not present locally and envhub never "
                    f"pulls; load it, or map it to a local image with "
                    f"--env-arg base_images='{ref}=python'"
                )
            local = resolve_image(base_images[ref])
            if not image_exists(local):
                raise TaskBuildError(
                    f"task {task}: base image {ref} maps to {local}, which is not built "
                    f"(envhub sandbox build {base_images[ref]}, or load it)"
                )
        bases.append(local)
        return f"{m.group(1)}{m.group(2)}{local}{m.group(4)}"

    return _FROM.sub(one, dockerfile), bases


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.")[:80] or "task"


def ensure_image(task: HarborTask, base_images: Mapping[str, str]) -> str:
    """The task's image reference, built on first use (blocking: call it in a thread)."""
    if task.context_dir is None:
        assert task.docker_image is not None
        if not image_exists(task.docker_image):
            raise TaskBuildError(
                f"task {task.name}: [environment] docker_image {task.docker_image} is not "
                "present locally and envhub never pulls; load it first"
            )
        return task.docker_image
    dockerfile = (task.context_dir / "Dockerfile").read_text("utf-8")
    rewritten, bases = _rewrite(dockerfile, base_images, task.name)
    h = hashlib.sha256(f"envhub-harbor-image:{_BUILDER_VERSION}\n".encode())
    h.update(tree_digest(task.context_dir).encode())
    h.update(rewritten.encode())
    for base in bases:  # the base's own id: a rebuilt local base gives a new tag
        h.update(run_docker("image", "inspect", "-f", "{{.Id}}", base).stdout.encode())
    tag = f"envhub/harbor-{_slug(task.name)}:{h.hexdigest()[:12]}"
    return build_image_once(tag, lambda: _build(task, rewritten, tag))


def _build(task: HarborTask, dockerfile: str, tag: str) -> None:
    assert task.context_dir is not None
    with tempfile.TemporaryDirectory(prefix="envhub-harbor-") as tmp:
        ctx = Path(tmp) / "context"
        shutil.copytree(task.context_dir, ctx, symlinks=True)
        (ctx / "Dockerfile").write_text(dockerfile)
        try:
            proc = run_docker(
                "build", "--network", "none", "--force-rm", "-q", "-t", tag, str(ctx),
                timeout=task.build_timeout_s,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise TaskBuildError(
                f"task {task.name}: image build exceeded build_timeout_sec "
                f"({task.build_timeout_s:g} s)"
            ) from None
    if proc.returncode != 0:
        reason = _build_failure(proc.stderr)
        raise TaskBuildError(f"task {task.name}: docker build failed: {reason}")


def _build_failure(stderr: str) -> str:
    """docker's reason on one line: its last lines, without the legacy builder's notice."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(
        ("DEPRECATED:", "Install the buildx", "https://docs.docker.com/go/buildx"))]  # fmt: skip
    return " | ".join(lines[-3:])[-1500:] or "(no output)"

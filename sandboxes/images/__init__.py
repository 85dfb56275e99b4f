"""Sandbox image recipes (one directory per image) and their idempotent builder.

Why debootstrap: our machines reach Debian's mirror but no container registry, so the
``base`` image is a ``debootstrap --variant=minbase`` root file system fed to
``docker import``; ``python`` installs Debian packages into a copy of base's file system
(exported from the base image) with ``chroot apt-get``, so it layers on base without
needing network inside a container (dockerd runs with ``--bridge=none``). Where a
registry is reachable, ``build(name, dockerfile=True)`` runs ``docker build`` on the
recipe's ``Dockerfile`` instead (``FROM debian:bookworm-slim`` etc.).

Images are tagged ``envhub/<name>:<content hash>`` (hash of the recipe, its parent's
hash and the builder version), so a build is skipped when the tag exists and redone
when the recipe changes; concurrent first uses build a tag once (:func:`build_image_once`).
``envhub/<name>:latest`` points at the newest build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from envhub.errors import SandboxError
from envhub.runtime.cache import cache_root, locked
from envhub.sandboxes.docker_cli import docker_cli, run_docker

__all__ = [
    "Recipe",
    "UserSpec",
    "build",
    "build_image_once",
    "content_hash",
    "image_exists",
    "image_tag",
    "list_recipes",
    "load_recipe",
    "resolve_image",
    "tree_digest",
]

_RECIPES_DIR = Path(__file__).parent
_BUILDER_VERSION = "1"
_DEFAULT_USER = {"name": "sandbox", "uid": 1000}


class UserSpec(BaseModel):
    name: str = "sandbox"
    uid: int = 1000


class Recipe(BaseModel):
    """``recipe.yaml``: how to make one image."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["debootstrap"] = "debootstrap"
    parent: str | None = None
    suite: str = "bookworm"
    variant: str = "minbase"
    mirror: str = "http://deb.debian.org/debian"
    packages: list[str] = Field(default_factory=list)
    user: UserSpec = Field(default_factory=UserSpec)
    workdir: str = "/work"
    env: dict[str, str] = Field(default_factory=dict)


def list_recipes() -> list[str]:
    return sorted(p.parent.name for p in _RECIPES_DIR.glob("*/recipe.yaml"))


def load_recipe(name: str) -> Recipe:
    path = _RECIPES_DIR / name / "recipe.yaml"
    if not path.is_file():
        raise SandboxError(
            f"no sandbox image recipe {name!r}; known: {', '.join(list_recipes()) or 'none'}"
        )
    return Recipe.model_validate(yaml.safe_load(path.read_text()) or {})


def tree_digest(root: Path) -> str:
    """A hash of every file's relative path and bytes under ``root`` (a clean copy)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def content_hash(name: str) -> str:
    """Hash of everything that determines the image (recipe dir, parent chain)."""
    h = hashlib.sha256(f"envhub-image-builder:{_BUILDER_VERSION}\n".encode())
    for f in sorted((_RECIPES_DIR / name).iterdir()):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    parent = load_recipe(name).parent
    if parent:
        h.update(content_hash(parent).encode())
    return h.hexdigest()[:12]


def image_tag(name: str) -> str:
    """The docker reference for a recipe name (``envhub/base:1a2b3c...``)."""
    return f"envhub/{name}:{content_hash(name)}"


def resolve_image(image: str) -> str:
    """A recipe name becomes its content-hash tag; anything else is used as given."""
    if "/" not in image and ":" not in image and (_RECIPES_DIR / image / "recipe.yaml").is_file():
        return image_tag(image)
    return image


def image_exists(ref: str) -> bool:
    return run_docker("image", "inspect", ref).returncode == 0


def _run(cmd: list[str], log: bool) -> None:
    out = None if log else subprocess.DEVNULL
    proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE if not log else None)
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace")[-2000:] if proc.stderr else ""
        raise SandboxError(f"image build step failed ({' '.join(cmd[:3])}...): {detail}")


def _add_user(root: Path, recipe: Recipe) -> None:
    """Add the sandbox user without passwd tools (minbase has no useradd)."""
    u = recipe.user
    passwd, group = root / "etc/passwd", root / "etc/group"
    if f":{u.uid}:" not in passwd.read_text():
        with passwd.open("a") as f:
            f.write(f"{u.name}:x:{u.uid}:{u.uid}::{recipe.workdir}:/bin/sh\n")
        with group.open("a") as f:
            f.write(f"{u.name}:x:{u.uid}:\n")
    wd = root / recipe.workdir.lstrip("/")
    wd.mkdir(parents=True, exist_ok=True)
    os.chown(wd, u.uid, u.uid)


def _export_image(ref: str, dest: Path) -> None:
    cid = run_docker("create", ref, "true", check=True).stdout.strip()
    try:
        exp = subprocess.Popen([docker_cli(), "export", cid], stdout=subprocess.PIPE)
        tar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=exp.stdout)
        exp.wait()
        if exp.returncode or tar.returncode:
            raise SandboxError(f"exporting {ref} failed")
    finally:
        run_docker("rm", "-f", cid)


def _chroot_install(root: Path, packages: list[str], log: bool) -> None:
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    try:
        for cmd in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
            ["apt-get", "clean"],
        ):
            proc = subprocess.run(
                ["chroot", str(root), *cmd], env=env, stdout=None if log else subprocess.DEVNULL
            )
            if proc.returncode != 0:
                raise SandboxError(f"chroot {' '.join(cmd)} failed in image build")
    finally:
        (root / "etc/resolv.conf").unlink(missing_ok=True)
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        (root / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)


def _import(root: Path, tag: str, recipe: Recipe) -> None:
    changes = [
        f"USER {recipe.user.uid}:{recipe.user.uid}",
        f"WORKDIR {recipe.workdir}",
        'CMD ["sleep", "infinity"]',
        *(f"ENV {k}={v}" for k, v in recipe.env.items()),
    ]
    args = ["import", *(x for c in changes for x in ("--change", c)), "-", tag]
    tar = subprocess.Popen(
        ["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
    )
    imp = run_docker(*args, stdin=tar.stdout)
    tar.wait()
    if tar.returncode or imp.returncode:
        raise SandboxError(f"docker import {tag} failed: {imp.stderr}")


def build_image_once(tag: str, build: Callable[[], None], *, force: bool = False) -> str:
    """Docker image ``tag``, made by ``build()`` unless it exists (or ``force``).

    Tags are content hashes, so an existing tag is the finished image, and docker only
    tags an image once its build or import succeeded. Builds of one tag run one at a time
    across threads and processes (:func:`envhub.runtime.cache.locked`, lock files in
    ``$ENVHUB_CACHE/images``): the first to take the lock builds, the others find it.
    """
    if not force and image_exists(tag):
        return tag
    with locked(cache_root("images") / tag.replace("/", "_").replace(":", "-")):
        if force or not image_exists(tag):
            build()
    return tag


def build(name: str, *, force: bool = False, dockerfile: bool = False, log: bool = True) -> str:
    """Build recipe ``name`` (and its parents) unless already built; return the tag."""
    recipe = load_recipe(name)
    tag = image_tag(name)
    return build_image_once(tag, lambda: _build(name, recipe, tag, dockerfile, log), force=force)


def _build(name: str, recipe: Recipe, tag: str, dockerfile: bool, log: bool) -> None:
    latest = f"envhub/{name}:latest"
    if dockerfile:
        _run([docker_cli(), "build", "-t", tag, "-t", latest, str(_RECIPES_DIR / name)], log)
        return
    if os.geteuid() != 0:
        raise SandboxError("building a debootstrap image needs root (debootstrap, chroot)")
    if recipe.parent:
        parent_tag = build(recipe.parent, log=log)
    with tempfile.TemporaryDirectory(prefix=f"envhub-image-{name}-") as tmp:
        root = Path(tmp) / "rootfs"
        root.mkdir()
        if recipe.parent:
            _export_image(parent_tag, root)
            if recipe.packages:
                _chroot_install(root, recipe.packages, log)
        else:
            if shutil.which("debootstrap") is None:
                raise SandboxError("debootstrap not found: apt-get install debootstrap")
            cmd = ["debootstrap", f"--variant={recipe.variant}"]
            if recipe.packages:
                cmd.append("--include=" + ",".join(recipe.packages))
            _run([*cmd, recipe.suite, str(root), recipe.mirror], log)
            shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
            (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        _add_user(root, recipe)
        # imported under a staging tag, tagged for real only once the import succeeded
        staging = f"{tag}-staging{os.getpid()}"
        try:
            _import(root, staging, recipe)
            for ref in (tag, latest):
                if run_docker("tag", staging, ref).returncode != 0:
                    raise SandboxError(f"docker tag {staging} {ref} failed")
        finally:
            run_docker("rmi", staging)


def _main(argv: list[str]) -> int:
    """``python -m envhub.sandboxes.images build NAME`` (used by .ci/sandbox_setup.sh)."""
    if len(argv) != 2 or argv[0] != "build":
        print("usage: python -m envhub.sandboxes.images build NAME", file=sys.stderr)
        return 2
    print(build(argv[1]))
    return 0

"""``envhub image build ENV``: one Docker image per environment, serving the API.

Two images, each content-tagged and built once (:func:`envhub.sandboxes.images.build_image_once`):

- ``envhub/runtime:<hash>``: a sandbox base image (``python``, built by debootstrap) plus a
  virtualenv at ``/opt/envhub/venv`` with envhub and its ``server`` extra. Every
  environment image starts from it, so they share that layer;
- ``envhub/<env>:<hash>`` (and ``:latest``): the runtime plus the plugin, its data built
  at build time by the recipe's ``prepare`` from what its ``fetch`` downloaded on the
  host (:mod:`envhub.environment_images.recipe`), a non-root user, a health check and
  ``envhub serve ENV --host 0.0.0.0 --port 8000`` as entrypoint.

A tag hashes everything that goes in: the parent tag, the Dockerfile template, the
recipe, the envhub and plugin versions and their source files. An unchanged rebuild is
therefore a no-op (the tag exists, nothing runs), and a changed plugin version or file
gives a new tag. ``docker build`` runs with ``--network none``: pip installs only the
host-made wheels (:mod:`envhub.environment_images.wheelhouse`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envhub.environment_images.recipe import EnvImageRecipe, load_env_recipe, recipe_digest
from envhub.environment_images.wheelhouse import (
    Source,
    build_wheels,
    envhub_source,
    plugin_source,
)
from envhub.errors import EnvhubError
from envhub.sandboxes import images as sandbox_images
from envhub.sandboxes.docker_cli import run_docker

__all__ = [
    "CONTAINER_PORT",
    "LABEL",
    "VENV",
    "BuildPlan",
    "build_env_image",
    "env_image_tag",
    "plan_env_image",
]

VENV = "/opt/envhub/venv"
CACHE_DIR = "/opt/envhub/cache"
CONTAINER_PORT = 8000
LABEL = "envhub.image"  # value: "runtime" or "env"; what `envhub image list/rm` look at
_BUILDER_VERSION = "1"
_SERVE_USER = "1000:1000"  # the sandbox images' user (`sandbox`, uid 1000)

_HEALTH_PROBE = (
    "import urllib.request; "
    "urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=2)"
)

_RUNTIME_DOCKERFILE = """\
FROM {base}
USER root
COPY wheels /tmp/wheels
RUN python3 -m venv {venv} \\
 && {venv}/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels "{core}[server]" \\
 && rm -rf /tmp/wheels
ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    ENVHUB_CACHE={cache} HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
LABEL {label}="runtime" envhub.version="{envhub_version}"
"""

_ENV_DOCKERFILE = """\
FROM {runtime}
USER root
COPY wheels /tmp/wheels
RUN pip install --no-index --no-cache-dir --find-links /tmp/wheels "{requirement}" \\
 && rm -rf /tmp/wheels
COPY fetched {cache}
COPY prepare.py /opt/envhub/prepare.py
RUN mkdir -p {cache} && python /opt/envhub/prepare.py && chmod -R a+rX {cache}
ENV {env_vars}
USER {user}
WORKDIR /tmp
EXPOSE {port}
HEALTHCHECK --interval=2s --timeout=3s --start-period=120s --retries=3 \\
  CMD ["python", "-c", "{health_probe}"]
ENTRYPOINT ["envhub", "serve", "{env}", "--host", "0.0.0.0", "--port", "{port}"]
LABEL {labels}
"""


@dataclass(frozen=True)
class BuildPlan:
    """What ``envhub image build ENV`` would build: the tags, sources and recipe."""

    env: str
    tag: str
    runtime_tag: str
    base_tag: str
    recipe: EnvImageRecipe
    envhub: Source
    plugin: Source
    envhub_digest: str
    plugin_digest: str


def _hash(*parts: str) -> str:
    h = hashlib.sha256(f"envhub-env-image:{_BUILDER_VERSION}\n".encode())
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:12]


def _digest(source: Source) -> str:
    with tempfile.TemporaryDirectory(prefix="envhub-src-") as tmp:
        return sandbox_images.tree_digest(source.copy_to(Path(tmp) / "src"))


def plan_env_image(env: str) -> BuildPlan:
    """The tags ``env``'s image and its runtime get, from the installed sources (cheap:
    copies and hashes the source files, builds nothing)."""
    recipe = load_env_recipe(env)
    envhub = envhub_source()
    plugin = plugin_source(env, recipe.extras)
    base_tag = sandbox_images.image_tag(recipe.base)
    envhub_digest, plugin_digest = _digest(envhub), _digest(plugin)
    runtime_tag = "envhub/runtime:" + _hash(
        base_tag, _RUNTIME_DOCKERFILE, envhub.version, envhub_digest, *envhub.requires
    )
    tag = f"envhub/{env}:" + _hash(
        runtime_tag, _ENV_DOCKERFILE, _HEALTH_PROBE, recipe_digest(env), env, plugin.name,
        plugin.version, plugin_digest, *plugin.requires,
    )  # fmt: skip
    return BuildPlan(
        env, tag, runtime_tag, base_tag, recipe, envhub, plugin, envhub_digest, plugin_digest
    )


def env_image_tag(env: str) -> str:
    """The content tag ``envhub image build ENV`` produces from what is installed now."""
    return plan_env_image(env).tag


def _docker_build(context: Path, *tags: str) -> None:
    tag_args = [x for t in tags for x in ("-t", t)]
    # no registry and no network: the legacy builder, networking off, parents local
    proc = run_docker("build", "--network", "none", "--force-rm", "-q", *tag_args, str(context))
    if proc.returncode != 0:
        raise EnvhubError(f"docker build of {tags[0]} failed: {proc.stderr[-3000:]}")


def _build_runtime(plan: BuildPlan) -> None:
    with tempfile.TemporaryDirectory(prefix="envhub-image-runtime-") as tmp:
        ctx = Path(tmp)
        src = plan.envhub.copy_to(ctx / "src" / "envhub")
        build_wheels(src, plan.envhub.requires, ctx / "wheels")
        (ctx / "Dockerfile").write_text(
            _RUNTIME_DOCKERFILE.format(
                base=plan.base_tag, venv=VENV, cache=CACHE_DIR, label=LABEL,
                core=plan.envhub.name, envhub_version=plan.envhub.version,
            )
        )  # fmt: skip
        shutil.rmtree(ctx / "src")
        _docker_build(ctx, plan.runtime_tag)


def _labels(plan: BuildPlan) -> str:
    labels = {
        LABEL: "env",
        "envhub.env": plan.env,
        "envhub.plugin": f"{plan.plugin.name}=={plan.plugin.version}",
        "envhub.version": plan.envhub.version,
        "envhub.run.read_only": "1" if plan.recipe.read_only else "0",
        "envhub.run.tmpfs": ",".join(plan.recipe.tmpfs),
        "envhub.run.nested_sandbox": "1" if plan.recipe.nested_sandbox else "0",
    }
    return " ".join(f"{k}={json.dumps(v)}" for k, v in labels.items())


def _fetch(plan: BuildPlan, dest: Path) -> None:
    """Run the recipe's ``fetch`` on this host (it reaches PyPI; ``docker build`` does not),
    filling ``dest``, which the image gets as its ``$ENVHUB_CACHE``."""
    dest.mkdir()
    if not plan.recipe.fetch:
        return
    proc = subprocess.run(
        [sys.executable, "-c", plan.recipe.fetch],
        env={**os.environ, "ENVHUB_FETCH_DIR": str(dest)}, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise EnvhubError(
            f"the fetch step of {plan.env}'s image recipe failed: {proc.stderr[-3000:]}"
        )


def _build_env(plan: BuildPlan) -> None:
    extras = f"[{','.join(plan.recipe.extras)}]" if plan.recipe.extras else ""
    env_vars = {"ENVHUB_IMAGE_ENV": plan.env, **plan.recipe.env}
    with tempfile.TemporaryDirectory(prefix=f"envhub-image-{plan.env}-") as tmp:
        ctx = Path(tmp)
        src = plan.plugin.copy_to(ctx / "src" / plan.plugin.name)
        build_wheels(src, plan.plugin.requires, ctx / "wheels")
        shutil.rmtree(ctx / "src")
        _fetch(plan, ctx / "fetched")
        (ctx / "prepare.py").write_text(plan.recipe.prepare or "pass\n")
        (ctx / "Dockerfile").write_text(
            _ENV_DOCKERFILE.format(
                runtime=plan.runtime_tag, requirement=f"{plan.plugin.name}{extras}",
                cache=CACHE_DIR, user=_SERVE_USER, port=CONTAINER_PORT, env=plan.env,
                health_probe=_HEALTH_PROBE.format(port=CONTAINER_PORT),
                env_vars=" ".join(f"{k}={json.dumps(v)}" for k, v in env_vars.items()),
                labels=_labels(plan),
            )
        )  # fmt: skip
        _docker_build(ctx, plan.tag, plan.tag.rsplit(":", 1)[0] + ":latest")


def build_env_image(env: str, *, force: bool = False) -> str:
    """Build ``env``'s image (its base and runtime images first, each only if missing);
    returns its tag. With ``force`` the runtime and env images are rebuilt."""
    plan = plan_env_image(env)
    sandbox_images.build(plan.recipe.base, log=False)
    sandbox_images.build_image_once(plan.runtime_tag, lambda: _build_runtime(plan), force=force)
    return sandbox_images.build_image_once(plan.tag, lambda: _build_env(plan), force=force)

"""Environment image recipes: what an environment's image needs beyond envhub itself.

One YAML file per environment in ``envhub/environment_images/recipes/<env>.yaml`` (shipped
as package data); an environment without one gets the default recipe (``python`` base, nothing to
prepare). The recipe's bytes are part of the image's content tag, so editing a recipe
gives a new image.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from envhub.errors import EnvhubError

__all__ = ["EnvImageRecipe", "load_env_recipe", "recipe_digest"]

_RECIPES_DIR = Path(__file__).parent / "recipes"


class EnvImageRecipe(BaseModel):
    """``recipes/<env>.yaml``.

    - ``base``: the sandbox image recipe the image starts from (``envhub sandbox build``
      names: ``python``, ``chromium`` for a browser, ``bwrap`` for bubblewrap);
    - ``extras``: the plugin distribution's extras to install;
    - ``fetch``: Python run on the build host before ``docker build`` (which has no
      network), with ``$ENVHUB_FETCH_DIR`` an empty folder: what it leaves there is
      copied into the image's ``$ENVHUB_CACHE`` before ``prepare`` runs. For downloads
      ``prepare`` needs (sdists, wheels), made with the plugin's own code on the host;
    - ``prepare``: Python run once at build time, as root, with ``$ENVHUB_CACHE`` pointing
      into the image: it builds the plugin's data (databases, indexes) with the plugin's
      own code, so containers start with everything in place and never write it;
    - ``read_only``: run with a read-only root file system (``tmpfs`` paths stay writable);
    - ``nested_sandbox``: the environment makes its own ``bwrap`` sandboxes inside the
      container, so its containers are confined less than any other image's
      (:data:`envhub.environment_images.run.NESTED_SANDBOX_OPTIONS`, for this image only): envhub's
      seccomp denylist replaces docker's allowlist (user namespaces, ``mount`` and
      ``pivot_root`` allowed); ``/proc`` and ``/sys`` are unmasked, for the server and
      the model's commands alike (docker's masked paths such as ``/proc/kcore``,
      ``/proc/keys``, ``/proc/timer_list``, ``/proc/acpi`` and ``/sys/firmware`` are the
      kernel's files again, readable as their modes allow; ``/proc/sys``, ``/proc/bus``,
      ``/proc/fs``, ``/proc/irq`` and ``/proc/sysrq-trigger`` are no longer read-only
      mounts, though their root-owned files stay unwritable to uid 1000); AppArmor is
      off. The rest stays (uid 1000, no capability, ``no-new-privileges``, read-only
      root, limits, network). Only swe sets it: a kernel bug reachable through user
      namespaces is a way out, so run such images on dedicated nodes or a VM-isolated
      runtime (gVisor, Kata) where that matters;
    - ``env``: environment variables baked into the image.
    """

    model_config = ConfigDict(extra="forbid")

    base: str = "python"
    extras: list[str] = Field(default_factory=list)
    fetch: str = ""
    prepare: str = ""
    read_only: bool = True
    nested_sandbox: bool = False
    tmpfs: list[str] = Field(default_factory=lambda: ["/tmp"])
    env: dict[str, str] = Field(default_factory=dict)


def _recipe_path(env: str) -> Path:
    return _RECIPES_DIR / f"{env}.yaml"


def load_env_recipe(env: str) -> EnvImageRecipe:
    """The recipe of environment ``env`` (the default one when it has no file)."""
    path = _recipe_path(env)
    if not path.is_file():
        return EnvImageRecipe()
    try:
        return EnvImageRecipe.model_validate(yaml.safe_load(path.read_text()) or {})
    except (yaml.YAMLError, ValueError) as exc:
        raise EnvhubError(f"bad image recipe {path}: {exc}") from None


def recipe_digest(env: str) -> str:
    """A hash of the recipe as written (the default recipe when there is no file)."""
    path = _recipe_path(env)
    text = path.read_bytes() if path.is_file() else EnvImageRecipe().model_dump_json().encode()
    return hashlib.sha256(text).hexdigest()

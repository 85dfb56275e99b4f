"""Plugin registry: environments found through the ``envhub.environments`` entry points.

Listing reads entry-point metadata only; a plugin's module is imported when it is
made (``make``) or inspected (``describe``). ``"package.module:Class"`` works as an
environment id without any registration, and ``ENVHUB_BLOCK_PLUGINS=a,b`` hides
plugins, as pytest's ``-p no:name`` does.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel, Field

from envhub.environment import Environment, option_names
from envhub.errors import RegistryError

__all__ = [
    "ENTRY_POINT_GROUP",
    "EnvListing",
    "EnvSpec",
    "describe",
    "discover",
    "list_environments",
    "load_environment_class",
]

ENTRY_POINT_GROUP = "envhub.environments"


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment: its id, ``module:Class`` entry point and distribution."""

    name: str
    entry_point: str
    distribution: str | None = None
    version: str | None = None

    def load(self) -> type[Environment]:
        module_name, _, attr = self.entry_point.partition(":")
        try:
            module = importlib.import_module(module_name)
            cls = getattr(module, attr) if attr else module
        except Exception as exc:  # an import error of any kind must not crash listings
            hint = (
                f" (try `pip install --force-reinstall {self.distribution}`)"
                if self.distribution
                else ""
            )
            raise RegistryError(
                f"environment {self.name!r} failed to import from {self.entry_point}: "
                f"{type(exc).__name__}: {exc}{hint}"
            ) from exc
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise RegistryError(f"{self.entry_point} is not an envhub.Environment subclass")
        return cls


def _blocked() -> set[str]:
    return {n.strip() for n in os.environ.get("ENVHUB_BLOCK_PLUGINS", "").split(",") if n.strip()}


def discover() -> dict[str, EnvSpec]:
    """Installed plugins by name, without importing them."""
    specs: dict[str, EnvSpec] = {}
    blocked = _blocked()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in blocked:
            continue
        dist = getattr(ep, "dist", None)
        specs[ep.name] = EnvSpec(
            name=ep.name,
            entry_point=ep.value,
            distribution=dist.metadata["Name"] if dist is not None else None,
            version=dist.version if dist is not None else None,
        )
    return specs


def load_environment_class(name: str) -> type[Environment]:
    """Resolve an environment id (plugin name or ``module:Class``) to its class."""
    if ":" in name:
        return EnvSpec(name=name, entry_point=name).load()
    specs = discover()
    if name not in specs:
        installed = ", ".join(sorted(specs)) or "none"
        raise RegistryError(
            f"unknown environment {name!r} (installed: {installed}); "
            f"install its plugin, e.g. `pip install envhub-{name}`"
        )
    return specs[name].load()


class EnvListing(BaseModel):
    """One row of ``envhub list`` / ``GET /v1/environments``."""

    name: str
    version: str | None = None
    tools: list[str] = Field(default_factory=list)
    tasks: int | None = None
    splits: list[str] = Field(default_factory=list)
    options: list[str] = Field(default_factory=list)
    error: str | None = None


def describe(name: str, options: dict[str, Any] | None = None) -> EnvListing:
    """Import one environment and summarise it; failures are reported, not raised."""
    from envhub.local import LocalEnvironment

    try:
        env = LocalEnvironment(name, options or {})
        tasks = env.tasks
    except Exception as exc:
        spec = discover().get(name)
        return EnvListing(name=name, version=spec.version if spec else None, error=str(exc))
    return EnvListing(
        name=env.name,
        version=env.version,
        tools=list(env.env_class.tool_specs()),
        tasks=len(tasks),
        splits=tasks.splits,
        options=option_names(env.env_class),
    )


def list_environments() -> list[EnvListing]:
    return [describe(name) for name in sorted(discover())]

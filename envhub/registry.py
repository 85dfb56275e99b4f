"""Plugin discovery: environments found through the ``envhub.environments`` entry points,
and trajectory exporters through ``envhub.exporters``.

This module is the cheap half of the registry: :func:`discover_environments` reads
entry-point metadata and imports no plugin, and :func:`load_environment_class` imports
one plugin's module on demand (``make``). Building environments to describe them (tools,
task counts) is :mod:`envhub.clients.describe`'s job. ``"package.module:Class"`` works as an
environment id without any registration, and ``ENVHUB_BLOCK_PLUGINS=a,b`` hides
plugins, as pytest's ``-p no:name`` does.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from envhub.environment import Environment
from envhub.errors import InvalidRequest, RegistryError
from envhub.trajectory import Trajectory

__all__ = [
    "ENTRY_POINT_GROUP",
    "EXPORTER_GROUP",
    "EnvSpec",
    "Exporter",
    "discover_environments",
    "exporter_names",
    "load_environment_class",
    "load_exporter",
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


def discover_environments() -> dict[str, EnvSpec]:
    """Installed plugins by name, from entry-point metadata only: no plugin is imported,
    so this is fast and a broken plugin still shows up (see :mod:`envhub.clients.describe`)."""
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
    specs = discover_environments()
    if name not in specs:
        installed = ", ".join(sorted(specs)) or "none"
        raise RegistryError(
            f"unknown environment {name!r} (installed: {installed}); "
            f"install its plugin, e.g. `pip install envhub-{name}`"
        )
    return specs[name].load()


# -- trajectory exporters ------------------------------------------------------------------
# A benchmark plugin can write trajectories in its benchmark's own result format (BFCL's
# result files, for instance) so that the benchmark's evaluator scores the same episodes
# envhub rewarded. ``envhub export --format NAME`` finds the exporter by name; the entry
# point is a callable ``(trajectories, output) -> int`` that writes under ``output`` (a file
# or a directory, as the format needs) and returns how many trajectories it wrote.

EXPORTER_GROUP = "envhub.exporters"

Exporter = Callable[[Iterable[Trajectory], Path], int]


def exporter_names() -> list[str]:
    """The export formats installed plugins provide."""
    return sorted({ep.name for ep in entry_points(group=EXPORTER_GROUP)})


def load_exporter(name: str) -> Exporter:
    """The exporter a plugin registered as ``name``; :class:`InvalidRequest` naming the
    installed ones when there is none."""
    for ep in entry_points(group=EXPORTER_GROUP):
        if ep.name == name:
            exporter: Exporter = ep.load()
            return exporter
    known = ", ".join(["parquet", "jsonl", *exporter_names()])
    raise InvalidRequest(f"unknown export format {name!r}; installed formats: {known}")

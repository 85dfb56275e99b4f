"""Describing installed environments: the heavy half of the registry.

:mod:`envhub.registry` finds plugins from entry-point metadata without importing them;
describing one imports its plugin, builds it with its options and loads its tasks, so
it costs what the plugin's start costs (seconds for a large task set). ``envhub list``
uses it. A plugin that fails at any of those steps is reported in its row, never
raised, so one broken plugin cannot hide the others. The summary itself is
:meth:`envhub.LocalEnvironment.describe`; this module only imports ``envhub.clients.local``, never
the other way round.
"""

from __future__ import annotations

from typing import Any

from envhub.clients.local import LocalEnvironment
from envhub.errors import OptionsRequired
from envhub.registry import discover_environments
from envhub.types import EnvironmentInfo

__all__ = ["describe_environment", "describe_environments"]


def describe_environment(name: str, options: dict[str, Any] | None = None) -> EnvironmentInfo:
    """Import, build and summarise one environment (plugin name or ``module:Class``) with
    ``options``; a failure is the row's ``error`` (an environment that needs operator
    options: its ``needs_options``), with the distribution and version its metadata gives."""
    try:
        return LocalEnvironment(name, options or {}).describe()
    except Exception as exc:  # a plugin's import or build may fail in any way
        spec = discover_environments().get(name)
        version = spec.version if spec is not None and spec.version else ""
        needs = isinstance(exc, OptionsRequired)
        return EnvironmentInfo(
            name=name, version=version,
            error=None if needs else f"{type(exc).__name__}: {exc}",
            needs_options=str(exc) if needs else None,
            distribution=spec.distribution if spec is not None else None,
            distribution_version=spec.version if spec is not None else None,
        )


def describe_environments() -> list[EnvironmentInfo]:
    """Every installed plugin described, sorted by name: imports and builds each one
    (slow; :func:`envhub.registry.discover_environments` lists names without importing)."""
    return [describe_environment(name) for name in sorted(discover_environments())]

"""Describing installed environments: the heavy half of the registry.

:mod:`envhub.registry` finds plugins from entry-point metadata without importing them;
describing one imports its plugin, builds it with its options and loads its tasks, so
it costs what the plugin's start costs (seconds for a large task set). ``envhub list``
and ``envhub info`` use it. A plugin that fails at any of those steps is reported in
its row, never raised, so one broken plugin cannot hide the others.
"""

from __future__ import annotations

from typing import Any

from envhub.local import LocalEnvironment
from envhub.options import client_option_schemas
from envhub.registry import discover_environments
from envhub.types import EnvironmentInfo

__all__ = ["describe_environment", "describe_environments", "environment_info"]


def environment_info(env: LocalEnvironment) -> EnvironmentInfo:
    """``env`` summarised: its tools, task count and splits (loading its tasks), the
    options it is built with, the options a server's clients may set, and its budgets."""
    tasks = env.tasks
    return EnvironmentInfo(
        name=env.name,
        version=env.version,
        tools=env.tools,
        tasks=len(tasks),
        splits=tasks.splits,
        options=env.options,
        client_options=client_option_schemas(env.env_class),
        budgets=env.budgets,
    )


def describe_environment(name: str, options: dict[str, Any] | None = None) -> EnvironmentInfo:
    """Import, build and summarise one environment (plugin name or ``module:Class``) with
    ``options``; a failure is the row's ``error``, with the version its metadata gives."""
    try:
        return environment_info(LocalEnvironment(name, options or {}))
    except Exception as exc:  # a plugin's import or build may fail in any way
        spec = discover_environments().get(name)
        version = spec.version if spec is not None and spec.version else ""
        return EnvironmentInfo(name=name, version=version, error=f"{type(exc).__name__}: {exc}")


def describe_environments() -> list[EnvironmentInfo]:
    """Every installed plugin described, sorted by name: imports and builds each one
    (slow; :func:`envhub.registry.discover_environments` lists names without importing)."""
    return [describe_environment(name) for name in sorted(discover_environments())]

"""Plugin discovery: every kind of plugin is found the same way, through its entry-point
group, with ``"package.module:Name"`` working as a name without any registration.

A :class:`PluginKind` names a group (``envhub.environments``, ``envhub.policies``,
``envhub.agents``, ``envhub.tito_backends``, ``envhub.tool_call_parsers``,
``envhub.sandboxes``); :func:`plugin_names` lists a group's names from metadata alone and
:func:`load_plugin` imports one on demand. envhub's own policies, backends and parsers are
entry points of its own distribution (``pyproject.toml``), found exactly as a third
party's are. ``ENVHUB_BLOCK_PLUGINS=a,b`` hides plugins of those names, as pytest's
``-p no:name`` does.

For environments, :func:`discover_environments` reads entry-point metadata and imports no
plugin, and :func:`load_environment_class` imports one plugin's module on demand
(``make``). Building environments to describe them (tools, task counts) is
:mod:`envhub.clients.describe`'s job.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from envhub.errors import EnvhubError, InvalidRequest, RegistryError

if TYPE_CHECKING:  # imported where used: listing plugins (envhub --help) needs no pydantic
    from envhub.environment import Environment
    from envhub.trajectory import Trajectory

__all__ = [
    "CORE_DISTRIBUTION",
    "ENTRY_POINT_GROUP",
    "ENVIRONMENTS",
    "EXPORTERS",
    "EXPORTER_GROUP",
    "SHIPPED_PLUGINS",
    "EnvSpec",
    "Exporter",
    "PluginKind",
    "discover_environments",
    "entry_point_names",
    "exporter_names",
    "load_environment_class",
    "load_exporter",
    "load_plugin",
    "plugin_names",
]

T = TypeVar("T")

CORE_DISTRIBUTION = "envhub-rl"
"""envhub's distribution (``pip install envhub-rl``; the import package and the CLI are
``envhub``): ``envhub`` on PyPI is an unrelated project's, so every install hint names
this one, and the plugins' distributions are ``envhub-rl-<name>``."""

SHIPPED_PLUGINS: dict[str, str] = {
    "bfcl": "envhub-rl-bfcl",
    "calc": "envhub-rl-calc",
    "harbor": "envhub-rl-harbor",
    "mcp": "envhub-rl-mcp",
    "miniwob": "envhub-rl-web",
    "openenv": "envhub-rl-openenv",
    "reasoning_gym": "envhub-rl-reasoning-gym",
    "search": "envhub-rl-search",
    "sql": "envhub-rl-sql",
    "support": "envhub-rl-web",
    "swe": "envhub-rl-swe",
    "verifiers": "envhub-rl-verifiers",
    "web": "envhub-rl-web",
}
"""The environments that envhub's own plugins (``environments/`` of its repository)
register, and the distribution of each: the only plugins an install hint may name, since
a name guessed from the environment's could be anyone's on PyPI (tests/core/test_registry.py
holds this equal to the plugins' ``pyproject.toml``)."""


@dataclass(frozen=True)
class PluginKind(Generic[T]):
    """One kind of plugin: the entry-point ``group`` that registers it, the ``noun`` its
    errors use, the error class they raise and a ``hint`` added to the unknown-name error
    (text, or a function of the name asked for that returns it). ``T`` is what an entry
    point of the group must name (a class or a factory): the consumer's contract, declared
    where the kind is."""

    group: str
    noun: str
    error: type[EnvhubError] = InvalidRequest
    hint: str | Callable[[str], str] = ""


def _environment_hint(name: str) -> str:
    """Why an environment is unknown: blocked, or envhub's own plugin of that name, else
    those of envhub's own plugins that are not installed. Never a distribution made up
    from ``name``: that would send the user to whoever owns it on PyPI."""
    if name in _blocked():
        return "ENVHUB_BLOCK_PLUGINS hides it"
    if name in SHIPPED_PLUGINS:
        return f"it is envhub's own plugin: pip install {SHIPPED_PLUGINS[name]}"
    installed = {found.ep.name for found in _group(ENVIRONMENTS.group, tuple(sys.path))}
    missing: dict[str, list[str]] = {}
    for env, dist in SHIPPED_PLUGINS.items():
        if env not in installed:
            missing.setdefault(dist, []).append(env)
    if not missing:
        return ""
    listed = ", ".join(f"{dist} ({', '.join(envs)})" for dist, envs in sorted(missing.items()))
    return f"more environments come with envhub's own plugins: pip install {listed}"


ENVIRONMENTS: PluginKind[type[Environment]] = PluginKind(
    "envhub.environments", "environment", RegistryError, _environment_hint
)
ENTRY_POINT_GROUP = ENVIRONMENTS.group


def _blocked() -> set[str]:
    return {n.strip() for n in os.environ.get("ENVHUB_BLOCK_PLUGINS", "").split(",") if n.strip()}


@functools.lru_cache(maxsize=8)
def _installed(path: tuple[str, ...]) -> EntryPoints:
    """Every installed entry point, read once per ``sys.path`` (``path`` is only the
    cache key: a distribution put on the path, as tests do, is seen)."""
    # entry_points() with no argument is Python 3.10/3.11's SelectableGroups, or 3.12's
    # EntryPoints; select() works on both and reads no metadata again
    return cast("EntryPoints", entry_points().select())


@dataclass(frozen=True)
class _Found:
    """An installed entry point with its distribution's name and version (``None``: an
    entry point outside any distribution), read from the distribution's metadata when first
    asked for: listing a group's names (``envhub --help``) parses no distribution's metadata."""

    ep: EntryPoint

    @functools.cached_property
    def distribution(self) -> str | None:
        dist = getattr(self.ep, "dist", None)
        return None if dist is None else str(dist.metadata["Name"])

    @functools.cached_property
    def version(self) -> str | None:
        dist = getattr(self.ep, "dist", None)
        return None if dist is None else str(dist.version)


@functools.lru_cache(maxsize=64)
def _group(group: str, path: tuple[str, ...]) -> tuple[_Found, ...]:
    """``group``'s entry points by name (as setuptools writes them, whatever order
    ``pyproject.toml`` gives), the first of a name winning (distributions in ``sys.path``
    order). Cached: environments resolve their sandbox backend each time one is built,
    and reading metadata costs milliseconds."""
    found: dict[str, _Found] = {}
    for ep in _installed(path).select(group=group):
        if ep.name not in found:
            found[ep.name] = _Found(ep)
    return tuple(found[name] for name in sorted(found))


def _entry_points(group: str) -> dict[str, _Found]:
    """``group``'s entry points by name, blocked ones left out."""
    blocked = _blocked()
    return {f.ep.name: f for f in _group(group, tuple(sys.path)) if f.ep.name not in blocked}


def plugin_names(kind: PluginKind[Any]) -> list[str]:
    """The names installed distributions register in ``kind``'s group, sorted, from
    metadata only (nothing is imported)."""
    return entry_point_names(kind.group)


def entry_point_names(group: str) -> list[str]:
    """:func:`plugin_names` of the kind whose entry-point group is ``group``, for a caller
    that lists a group without importing the module that declares its kind (``envhub
    --help`` lists the installed policies without importing what a policy is made of)."""
    return list(_entry_points(group))


def _import(kind: PluginKind[T], name: str, ep: EntryPoint, distribution: str | None) -> T:
    try:
        obj = ep.load()
    except Exception as exc:  # an import error of any kind must not crash listings
        hint = f" (try `pip install --force-reinstall {distribution}`)" if distribution else ""
        raise kind.error(
            f"{kind.noun} {name!r} failed to import from {ep.value}: "
            f"{type(exc).__name__}: {exc}{hint}"
        ) from exc
    if not callable(obj):
        raise kind.error(f"{kind.noun} {name!r}: {ep.value} is not a class or a function")
    return cast("T", obj)


def load_plugin(kind: PluginKind[T], name: str) -> T:
    """The class or factory registered as ``name`` in ``kind``'s group, or named by
    ``name`` itself when it is ``module:Name``; imported now. An unknown name, or one that
    fails to import, is ``kind.error`` naming the installed choices."""
    if ":" in name:
        return _import(kind, name, EntryPoint(name=name, value=name, group=kind.group), None)
    found = _entry_points(kind.group)
    if name not in found:
        known = ", ".join(found) or "none installed"
        hint = kind.hint(name) if callable(kind.hint) else kind.hint
        hint = f"; {hint}" if hint else ""
        raise kind.error(
            f"unknown {kind.noun} {name!r}; choose one of {known}, or a module:Name "
            f"(plugins register names in the {kind.group} entry-point group){hint}"
        )
    return _import(kind, name, found[name].ep, found[name].distribution)


def _environment_class(obj: object, where: str) -> type[Environment]:
    from envhub.environment import Environment

    if not (isinstance(obj, type) and issubclass(obj, Environment)):
        raise RegistryError(f"{where} is not an envhub.Environment subclass")
    return obj


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment: its id, ``module:Class`` entry point and distribution."""

    name: str
    entry_point: str
    distribution: str | None = None
    version: str | None = None

    def load(self) -> type[Environment]:
        ep = EntryPoint(name=self.name, value=self.entry_point, group=ENVIRONMENTS.group)
        loaded = _import(ENVIRONMENTS, self.name, ep, self.distribution)
        return _environment_class(loaded, self.entry_point)


def discover_environments() -> dict[str, EnvSpec]:
    """Installed plugins by name, from entry-point metadata only: no plugin is imported,
    so this is fast and a broken plugin still shows up (see :mod:`envhub.clients.describe`)."""
    specs: dict[str, EnvSpec] = {}
    for name, found in _entry_points(ENVIRONMENTS.group).items():
        specs[name] = EnvSpec(name, found.ep.value, found.distribution, found.version)
    return specs


def load_environment_class(name: str) -> type[Environment]:
    """Resolve an environment id (plugin name or ``module:Class``) to its class."""
    return _environment_class(load_plugin(ENVIRONMENTS, name), name)


# -- trajectory exporters ------------------------------------------------------------------
# A benchmark plugin can write trajectories in its benchmark's own result format (BFCL's
# result files, for instance) so that the benchmark's evaluator scores the same episodes
# envhub rewarded. ``envhub export --format NAME`` finds the exporter by name; the entry
# point is a callable ``(trajectories, output) -> int`` that writes under ``output`` (a file
# or a directory, as the format needs) and returns how many trajectories it wrote.

Exporter = Callable[[Iterable["Trajectory"], Path], int]

EXPORTERS: PluginKind[Exporter] = PluginKind(
    "envhub.exporters", "export format", hint="parquet and jsonl are built in"
)
EXPORTER_GROUP = EXPORTERS.group


def exporter_names() -> list[str]:
    """The export formats installed plugins provide."""
    return plugin_names(EXPORTERS)


def load_exporter(name: str) -> Exporter:
    """The exporter a plugin registered as ``name``; :class:`InvalidRequest` naming the
    installed ones when there is none."""
    return load_plugin(EXPORTERS, name)

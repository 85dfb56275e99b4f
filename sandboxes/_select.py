"""Choosing a backend: an environment's ``sandbox`` option, else ``ENVHUB_SANDBOX``, else
the caller's default; and building one.

Backends are found by name in the ``envhub.sandboxes`` entry-point group, where envhub
registers ``local``, ``bwrap`` and ``docker`` as a plugin registers its own: an entry point
names a :class:`~envhub.sandboxes.base.Sandbox` class (or a factory) called as
``factory(spec, **options)``. ``module:Class`` works as a backend name too. Backends are
imported on demand so ``import envhub.sandboxes`` never imports docker.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, overload

from envhub.errors import InvalidRequest
from envhub.registry import PluginKind, load_plugin, plugin_names
from envhub.sandboxes.base import Sandbox, SandboxSpec

__all__ = [
    "SANDBOXES",
    "backend_names",
    "make_sandbox",
    "open_sandbox",
    "resolve_backend",
]

SANDBOXES: PluginKind[Callable[..., Sandbox]] = PluginKind("envhub.sandboxes", "sandbox backend")
ENV_VAR = "ENVHUB_SANDBOX"
DEFAULT_BACKEND = "local"


def backend_names() -> list[str]:
    """The installed backends' names (``--sandbox``), from metadata only."""
    return plugin_names(SANDBOXES)


@overload
def resolve_backend(option: str | None = None, *, default: str = DEFAULT_BACKEND) -> str: ...
@overload
def resolve_backend(option: str | None, *, default: None) -> str | None: ...


def resolve_backend(
    option: str | None = None, *, default: str | None = DEFAULT_BACKEND
) -> str | None:
    """The backend to use, by the one rule every environment follows: ``option`` (the
    environment's ``sandbox`` option, which ``--sandbox`` fills in), else the
    ``ENVHUB_SANDBOX`` environment variable (the operator's documented default), else
    ``default`` (``local``; ``None`` where "no sandbox" is a choice, as for SQL queries).

    Envhub never writes ``ENVHUB_SANDBOX``; only the operator sets it. The backend is
    loaded here, so a name that is neither installed (:func:`backend_names`) nor a
    ``module:Class`` that imports is refused where it is chosen: an
    :class:`InvalidRequest` that lists the installed ones. Names are case-insensitive;
    ``module:Class`` keeps its case.
    """
    name = option or os.environ.get(ENV_VAR) or default
    if name is None:
        return None
    name = name.strip() if ":" in name else name.strip().lower()
    load_plugin(SANDBOXES, name)
    return name


def make_sandbox(spec: SandboxSpec, backend: str | None = None, **options: Any) -> Sandbox:
    """An unstarted sandbox of the resolved backend (``start()`` or ``async with`` it);
    ``options`` are the backend's own (``LocalSandbox``'s ``base_dir``, for instance)."""
    name = resolve_backend(backend)
    sandbox = load_plugin(SANDBOXES, name)(spec, **options)
    if not isinstance(sandbox, Sandbox):
        raise InvalidRequest(f"sandbox backend {name!r} built {sandbox!r}, not a Sandbox")
    return sandbox


@asynccontextmanager
async def open_sandbox(
    spec: SandboxSpec | None = None, backend: str | None = None, **options: Any
) -> AsyncIterator[Sandbox]:
    """Start a sandbox, yield it, and always close it (also if starting fails halfway)."""
    sandbox = make_sandbox(spec or SandboxSpec(), backend, **options)
    async with sandbox:
        yield sandbox

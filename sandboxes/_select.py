"""Choosing a backend: an environment's ``sandbox`` option, else ``ENVHUB_SANDBOX``, else
the caller's default.

Backends are imported on demand so ``import envhub.sandboxes`` never imports docker.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, overload

from envhub.errors import InvalidRequest
from envhub.sandboxes.base import Sandbox, SandboxSpec

__all__ = ["BACKENDS", "make_sandbox", "open_sandbox", "resolve_backend"]

BACKENDS = ("local", "bwrap", "docker")
ENV_VAR = "ENVHUB_SANDBOX"
DEFAULT_BACKEND = "local"


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

    Envhub never writes ``ENVHUB_SANDBOX``; only the operator sets it. A name outside
    :data:`BACKENDS` is an :class:`InvalidRequest` that lists them.
    """
    name = option or os.environ.get(ENV_VAR) or default
    if name is None:
        return None
    name = name.strip().lower()
    if name not in BACKENDS:
        raise InvalidRequest(
            f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}"
        )
    return name


def make_sandbox(spec: SandboxSpec, backend: str | None = None, **options: Any) -> Sandbox:
    """An unstarted sandbox of the resolved backend (``start()`` or ``async with`` it)."""
    name = resolve_backend(backend)
    if name == "local":
        from envhub.sandboxes.local import LocalSandbox

        return LocalSandbox(spec, **options)
    if name == "bwrap":
        from envhub.sandboxes.bwrap import BwrapSandbox

        return BwrapSandbox(spec, **options)
    from envhub.sandboxes.docker import DockerSandbox

    return DockerSandbox(spec, **options)


@asynccontextmanager
async def open_sandbox(
    spec: SandboxSpec | None = None, backend: str | None = None, **options: Any
) -> AsyncIterator[Sandbox]:
    """Start a sandbox, yield it, and always close it (also if starting fails halfway)."""
    sandbox = make_sandbox(spec or SandboxSpec(), backend, **options)
    async with sandbox:
        yield sandbox

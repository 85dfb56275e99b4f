"""Import paths that moved when ``envhub/`` was laid out by role (0.2), kept working.

Each old module path is an alias of the module that now holds its code: ``import
envhub.client`` returns :mod:`envhub.clients.remote` itself (the same module object, so
``isinstance`` checks and monkeypatching see one module), with a
:class:`DeprecationWarning` naming the new path. The table is the changelog's list of
moves; the aliases go in a later release. One table and one finder instead of a
re-export file per old path keep ``envhub/`` down to the modules of the public contract.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install"]

MOVED: dict[str, str] = {
    "envhub._gym_plugin": "envhub.runtime.gym_registration",
    "envhub._http_transports": "envhub.clients._http_transports",
    "envhub._remote_calls": "envhub.clients._remote_calls",
    "envhub.agents.episode": "envhub.agents.agent_loop",
    "envhub.backoff": "envhub._util.backoff",
    "envhub.cache": "envhub.runtime.cache",
    "envhub.cleanup": "envhub.runtime.cleanup",
    "envhub.client": "envhub.clients.remote",
    "envhub.conformance": "envhub.testing.conformance",
    "envhub.describe": "envhub.clients.describe",
    "envhub.exporters": "envhub.registry",
    "envhub.fleet.pool": "envhub.clients.pooled",
    "envhub.fleet.replicas": "envhub.clients.replicas",
    "envhub.gc_tuning": "envhub._util.gc_tuning",
    "envhub.hostile": "envhub.testing.hostile",
    "envhub.images": "envhub.environment_images",
    "envhub.llm": "envhub.cli.llama_server",
    "envhub.local": "envhub.clients.local",
    "envhub.loop_thread": "envhub.runtime.loop_thread",
    "envhub.options": "envhub.runtime.client_options",
    "envhub.policies.tito.render": "envhub.tokens.chat_template",
    "envhub.scaffold": "envhub.cli.scaffold",
    "envhub.session": "envhub.runtime.session",
    "envhub.sized_lru": "envhub._util.sized_lru",
    "envhub.sync": "envhub.runtime.sync",
    "envhub.tokenizers": "envhub.tokens.tokenizers",
    "envhub.toolcalls": "envhub.tokens.tool_call_parsers",
    "envhub.trainers.token_policy": "envhub.policies.token_policy",
    "envhub.trainers.tokens": "envhub.trainers.token_rows",
    "envhub.view.tokens": "envhub.view.token_text",
}


def _new_name(old: str) -> str | None:
    """The new path of ``old`` or of a module inside a moved package."""
    if old in MOVED:
        return MOVED[old]
    package = old.rpartition(".")[0]
    while package:
        if package in MOVED:
            return f"{MOVED[package]}.{old[len(package) + 1 :]}"
        package = package.rpartition(".")[0]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; the old path goes in a later release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when :meth:`create_module` imported it under its new name."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = _new_name(fullname) if fullname.startswith("envhub.") else None
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())

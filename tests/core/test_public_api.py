"""The public surface: what ``__all__`` names in the public modules, and nothing else.

Plugins build on this surface only, so the core can change its internals without
breaking them; ``PUBLIC_MODULES`` is the one list of modules a plugin may import from.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import envhub

REPO = Path(__file__).resolve().parents[2]

PUBLIC_MODULES = (
    "envhub",
    "envhub.runtime.cache",
    "envhub.environment_images.run",  # containers on envhub's image network (bridges to images)
    "envhub.errors",
    "envhub.model_text",  # model text made safe: what a bridge hands another project's parsers
    "envhub.runtime.loop_thread",
    "envhub.rewards",
    "envhub.rewards.rubric",
    "envhub.rewards.sql",
    "envhub.rewards.swe",
    "envhub.rewards.text",
    "envhub.rewards.web",
    "envhub.sandboxes",
    "envhub.sandboxes.docker",  # the Docker sandbox, for plugins that run task containers
    "envhub.sandboxes.disposable_child",  # a confined child per score: scorers of hostile text
    "envhub.sandboxes.docker_cli",  # the docker CLI, for plugins that build images
    "envhub.sandboxes.images",
    "envhub.sandboxes.shared_pools",  # warm sandboxes shared by an environment's episodes
    "envhub.testing",
    "envhub.trajectory",  # the trajectory format: what exporters read
    "envhub.types",
    "envhub.users",  # simulated users: what a conversational environment builds on
)

PLUGIN_SOURCES = sorted(REPO.glob("environments/*/envhub_*/**/*.py"))


def _envhub_imports(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, imported name or None for a module import, line) of every envhub import."""
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "envhub":
                found += [(node.module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [
                (alias.name, None, node.lineno)
                for alias in node.names
                if alias.name.split(".")[0] == "envhub"
            ]
    return found


def _public_names(module: ModuleType) -> set[str]:
    names = getattr(module, "__all__", None)
    assert names is not None, f"{module.__name__} has no __all__"
    return set(names)


def test_plugins_import_only_the_public_surface() -> None:
    assert PLUGIN_SOURCES, "no plugin sources found"
    violations = []
    for path in PLUGIN_SOURCES:
        for module, name, line in _envhub_imports(path):
            where = f"{path.relative_to(REPO)}:{line}"
            if module not in PUBLIC_MODULES:
                violations.append(f"{where}: {module} is not a public module")
            elif (
                name is not None
                and f"{module}.{name}" not in PUBLIC_MODULES  # a public submodule, by name
                and name not in _public_names(importlib.import_module(module))
            ):
                violations.append(f"{where}: {module}.{name} is not in its __all__")
    assert not violations, "\n".join(violations)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_modules_export_what_they_define(module_name: str) -> None:
    """Every ``__all__`` name resolves, and every other top-level definition is ``_``-private."""
    module = importlib.import_module(module_name)
    exported = _public_names(module)
    missing = [name for name in sorted(exported) if not hasattr(module, name)]
    assert not missing, f"{module_name}.__all__ names what it lacks: {missing}"
    defined: list[str] = []
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.append(node.name)
        elif isinstance(node, ast.Assign):
            defined += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.append(node.target.id)
    unexported = [n for n in defined if not n.startswith("_") and n not in exported]
    assert not unexported, f"{module_name} defines public names outside __all__: {unexported}"


def test_the_session_module_is_not_shadowed() -> None:
    """``envhub.runtime.session`` is the module (its ``Session`` class); the blocking function
    that opens a session in scripts is ``envhub.sync_session``."""
    code = (
        "import envhub.runtime.session, envhub, types\n"
        "assert isinstance(envhub.runtime.session, types.ModuleType), envhub.runtime.session\n"
        "assert envhub.runtime.session.Session is envhub.Session\n"
        "assert envhub.sync_session.__module__ == 'envhub.runtime.sync'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    with envhub.sync_session("tests.core.toy_envs:ToyEnv", "toy-2") as session:
        assert session.reset().task_id == "toy-2"


def test_context_length_exceeded_is_exported() -> None:
    from envhub.errors import ContextLengthExceeded, PolicyError

    assert envhub.ContextLengthExceeded is ContextLengthExceeded
    assert issubclass(ContextLengthExceeded, PolicyError) and "ContextLengthExceeded" in (
        envhub.__all__
    )

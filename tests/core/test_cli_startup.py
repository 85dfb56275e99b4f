"""``envhub --help`` starts quickly: importing the CLI's entry module defines every command
without importing what the commands use (model clients, servers, trainers, browsers, the
progress bar, the plugins, envhub's own pydantic models, asyncio); each command imports
those in its body. ``import envhub`` itself imports none of the modules its names come from
until a name is used."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import envhub

# what some command needs, and `envhub --help` must not pay for
HEAVY = (
    "torch", "transformers", "datasets", "ray", "fastapi", "uvicorn", "starlette", "aiohttp",
    "httpx", "playwright", "openai", "litellm", "docker", "mcp", "gymnasium", "jinja2", "numpy",
    "pandas", "pyarrow", "prometheus_client", "llama_cpp", "uvloop", "orjson", "rich.progress",
    "rich.live", "envhub.server", "envhub.view", "envhub.rollout.run",
    "envhub.clients.remote", "envhub.policies.openai_compat",
)  # fmt: skip
# envhub's models and machinery, which a command's body imports and `--help` does not need:
# pydantic and asyncio count only where typer and rich do not import them already
CORE = (
    "pydantic", "asyncio", "envhub.budgets", "envhub.environment", "envhub.task",
    "envhub.tools", "envhub.types", "envhub.trajectory", "envhub.clients", "envhub.runtime",
    "envhub.sandboxes", "envhub.policies", "envhub.agents", "envhub.tokens", "envhub.rollout",
    "envhub.cli.llama_server", "envhub._util.net",
)  # fmt: skip


def _imported_by(code: str, watched: tuple[str, ...]) -> list[str]:
    """Those of ``watched`` that running ``code`` in a fresh interpreter imports, beyond what
    ``import typer, rich.console`` imports, and every plugin module (``envhub_*``)."""
    probe = (
        "import json, sys\n"
        "import typer, rich.console\n"
        "floor = set(sys.modules)\n"
        f"{code}\n"
        f"found = [m for m in {watched!r} if m in sys.modules and m not in floor]\n"
        "found += [m for m in sys.modules if m.startswith('envhub_')]\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_the_cli_entry_module_imports_no_heavy_module() -> None:
    assert _imported_by("import envhub.cli", HEAVY + CORE) == []


def test_the_root_help_imports_none_of_envhubs_models() -> None:
    help_run = (
        "from envhub.cli import main\n"
        "sys.argv = ['envhub', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert _imported_by(help_run, HEAVY + CORE) == []


def test_import_envhub_imports_no_exported_module_until_a_name_is_used() -> None:
    code = "import envhub\nloaded = sorted(m for m in sys.modules if m.startswith('envhub.'))"
    probe = f"import sys\n{code}\nprint(loaded)\nfrom envhub import make, tool\nprint(make)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert done.stdout.splitlines()[0] == "['envhub._moved']"
    assert "function make" in done.stdout


def test_the_lazy_names_are_the_type_checkers_names_and_all_of_all() -> None:
    """``envhub._EXPORTS`` (where each name is imported from at run time), the
    ``TYPE_CHECKING`` imports (what mypy and the API docs see) and ``__all__`` agree."""
    tree = ast.parse(Path(envhub.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and ast.unparse(node.test) == "TYPE_CHECKING")  # fmt: skip
    seen: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name}: re-export it `as` itself"
            module = node.module if node.module != "envhub" else f"envhub.{alias.name}"
            seen[alias.name] = module
    assert seen == envhub._EXPORTS
    assert sorted(envhub.__all__) == sorted(envhub._EXPORTS)
    assert set(envhub.__all__) <= set(dir(envhub))
    assert envhub.Session.__module__ == "envhub.runtime.session"
    assert envhub.rollout.__name__ == "envhub.rollout"


def _help(*command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "envhub.cli", *command, "--help"], capture_output=True,
        text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def test_help_lists_the_installed_plugins_of_each_kind_it_names_by_group() -> None:
    """The CLI names an entry-point group, not its kind, to list its plugins in ``--help``
    (the kind's module would import what the plugins are made of): the lists are the
    kinds' own."""
    from envhub.agents.factory import AGENTS
    from envhub.policies.factory import POLICIES, TITO_BACKENDS
    from envhub.registry import EXPORTERS, plugin_names
    from envhub.sandboxes import SANDBOXES
    from envhub.tokens.tool_call_parsers import TOOL_CALL_PARSERS

    rollout = _help("rollout")
    for kind in (POLICIES, TITO_BACKENDS, TOOL_CALL_PARSERS, AGENTS, SANDBOXES):
        assert plugin_names(kind), kind.group
        assert "|".join(plugin_names(kind)) in rollout, kind.group
    exporters = "|".join(plugin_names(EXPORTERS)) or "none installed"
    assert f"a plugin's format: {exporters}" in _help("export")


def test_llm_serve_spells_out_the_launchers_context_default() -> None:
    from envhub.cli.llama_server import DEFAULT_N_CTX
    from envhub.cli.llm import DEFAULT_N_CTX as CLI_DEFAULT

    assert CLI_DEFAULT == DEFAULT_N_CTX

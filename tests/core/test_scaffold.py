"""`envhub init` produces a plugin that pip-installs, passes `envhub check` and its generated
tests; the default template is minimal and neutral, and a name that an installed plugin
or an importable module has is refused."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envhub.cli.scaffold import scaffold_plugin
from envhub.errors import InvalidRequest

ENVHUB = Path(sys.executable).with_name("envhub")  # the console script of this venv


def _envhub(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENVHUB), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_init_creates_a_minimal_plugin_that_installs_and_checks(tmp_path: Path) -> None:
    made = _envhub("init", "demo_scaffold", "--dir", str(tmp_path / "demo"), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    target = tmp_path / "demo"
    package = target / "envhub_demo_scaffold"
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "env.py", "tasks.jsonl"]
    sources = "\n".join(p.read_text() for p in target.rglob("*") if p.is_file())
    assert "calc" not in sources.lower() and "DemoScaffoldEnv" in sources
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-e", str(target)], check=True)
    try:
        check = _envhub("check", "demo_scaffold", cwd=tmp_path)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "ok: 3 tasks of demo_scaffold" in check.stdout + check.stderr
        assert "warning" not in check.stderr  # the template's tool is fully described
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target / "tests")],
            capture_output=True, text=True, cwd=target,
        )  # fmt: skip
        assert tests.returncode == 0, tests.stdout + tests.stderr
        assert "2 passed" in tests.stdout
    finally:
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "-q", "-y", "envhub-rl-demo-scaffold"],
            check=True,
        )


def test_the_calc_template_is_a_renamed_copy_of_calc(tmp_path: Path) -> None:
    target = scaffold_plugin("abacus", tmp_path / "abacus", template="calc")
    env = (target / "envhub_abacus" / "env.py").read_text()
    assert "class AbacusEnv" in env and 'name = "abacus"' in env
    assert "envhub_calc" not in "".join(p.read_text() for p in target.rglob("*.py"))
    assert (target / "envhub_abacus" / "calculator.py").exists()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("calc", "environment name 'calc' is taken by an installed plugin"),
        ("json", "environment name 'json' would shadow the importable module 'json'"),
        ("Bad-Name", "invalid environment name 'Bad-Name'"),
    ],
)
def test_init_refuses_names_that_shadow_or_are_invalid(
    tmp_path: Path, name: str, reason: str
) -> None:
    refused = _envhub("init", name, cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: {reason}") and refused.stderr.count("\n") == 1
    assert not (tmp_path / "environments").exists()


def test_init_refuses_unknown_templates_and_existing_dirs(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="unknown template 'nope'"):
        scaffold_plugin("ok", tmp_path / "x", template="nope")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    with pytest.raises(InvalidRequest, match="not empty"):
        scaffold_plugin("ok", tmp_path / "full")

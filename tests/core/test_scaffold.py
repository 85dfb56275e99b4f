"""`envhub init` produces a plugin that pip-installs and whose generated tests pass."""

import subprocess
import sys
from pathlib import Path

import pytest

from envhub.cli.scaffold import scaffold_plugin
from envhub.errors import InvalidRequest


def test_init_creates_installable_plugin(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "envhub.cli",
            "init",
            "demo_scaffold",
            "--dir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    target = tmp_path / "demo"
    assert (target / "envhub_demo_scaffold" / "env.py").exists()
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-e", str(target)], check=True)
    try:
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target / "tests")],
            capture_output=True,
            text=True,
            cwd=target,
        )
        assert tests.returncode == 0, tests.stdout + tests.stderr
        assert "2 passed" in tests.stdout
    finally:
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "-q", "-y", "envhub-demo_scaffold"],
            check=True,
        )


def test_init_refuses_bad_names_and_existing_dirs(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="invalid environment name"):
        scaffold_plugin("Bad-Name", tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    with pytest.raises(InvalidRequest, match="not empty"):
        scaffold_plugin("ok", tmp_path / "full")

"""``envhub info`` reads as sections and tables for a person (JSON behind ``--json``), and
``envhub check`` and ``envhub info`` warn about a ``@tool`` whose schema leaves the model
guessing: the real ``envhub`` console script, run as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENVHUB = Path(sys.executable).with_name("envhub")  # the console script of this venv
SLOPPY = "tests.core.toy_envs:SloppyToolsEnv"
PEEK_GAPS = "warning: tool 'peek': no description; no type for key; no description for key"


def _envhub(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENVHUB), *args], capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip


def test_info_prints_sections_and_tables_and_json_on_request() -> None:
    shown = _envhub("info", "calc")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "calc 0.1.0: 3000 tasks (test 600, train 2400)"
    assert any("num_tasks" in line and "yes: integer, maximum 10000, minimum 1" in line
               for line in lines)  # fmt: skip
    assert any("calculate" in line and "expression: string" in line for line in lines)
    assert "sample task calc-0-00000:" in lines
    assert shown.stderr == ""  # calc's tools are fully described: no warning
    as_json = _envhub("info", "calc", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["client_options"]["num_tasks"]["maximum"] == 10_000


def test_check_and_info_name_each_tool_parameter_and_what_it_lacks() -> None:
    check = _envhub("check", SLOPPY)
    assert check.returncode == 0, check.stdout + check.stderr  # a warning, not a failure
    assert PEEK_GAPS in check.stderr.splitlines()
    assert "warning: tool 'note': no description for text" in check.stderr.splitlines()
    assert "docstring's Args: section" in check.stderr
    info = _envhub("info", SLOPPY, "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["tools"][1]["function"]["parameters"]["properties"] == {
        "key": {}
    }
    assert PEEK_GAPS in info.stderr.splitlines()
    clean = _envhub("check", "tests.core.toy_envs:ToyEnv", "--tasks", "0:2")
    assert "warning" not in clean.stderr

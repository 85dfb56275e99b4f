"""On an 80-column terminal, ``--help`` and the progress bar show every word whole: no
``<bool>`` placeholder after a flag, no environment-variable name or count cut with an
ellipsis. The real ``envhub`` console script in a subprocess, told it is on a terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ENVHUB = Path(sys.executable).with_name("envhub")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "LINES": "40", "TTY_COMPATIBLE": "1", "TERM": "xterm"}
    return subprocess.run(
        [str(ENVHUB), *args], capture_output=True, text=True, timeout=180, env=env, cwd=cwd
    )


@pytest.mark.parametrize("command", ["rollout", "serve", "list", "publish", "search", "install"])
def test_help_shows_flags_and_env_var_names_whole(command: str) -> None:
    shown = _run(command, "--help")
    assert shown.returncode == 0, shown.stderr
    text = _ANSI.sub("", shown.stdout)
    assert "<bool>" not in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    names = {"rollout": ["OPENAI_API_KEY", "ENVHUB_TOKEN"], "serve": ["ENVHUB_MAX_SESSIONS",
             "ENVHUB_MAX_OUTPUT_CHARS"], "list": [], "publish": ["ENVHUB_INDEX_URL"],
             "search": ["ENVHUB_INDEX_URL"], "install": ["ENVHUB_INDEX_URL"]}[command]  # fmt: skip
    for name in names:
        assert re.search(rf"\[env var:\s+{name}[;\]]", text), name


def test_progress_bar_keeps_counts_and_stats_whole(tmp_path: Path) -> None:
    """The title ("calc x reference(wrong_p=0.001)") is as long as a real model's name."""
    run = _run("rollout", "calc", "--policy", "reference", "--wrong-action-p", "0.001",
               "--tasks", "0:30", "-o", str(tmp_path / "run.jsonl"))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    frames = [line for line in _ANSI.sub("", run.stderr).splitlines() if "/30" in line]
    assert frames, run.stderr
    last = frames[-1]
    assert "30/30" in last and "masked 0" in last and last.rstrip().endswith("ep/s"), last
    assert "…" not in last and len(last) <= 80

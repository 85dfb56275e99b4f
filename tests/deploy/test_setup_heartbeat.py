"""``.ci/local_llm_setup.sh`` (which ``scripts/quickstart.sh`` runs) prints a line every
``$HEARTBEAT_S`` seconds while pip builds llama-cpp-python, instead of minutes of silence.

The real script runs with a stand-in interpreter whose ``-m pip install`` is a slow, silent
build, and stand-in ``cmake``/``g++`` so that no toolchain is installed."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
case "$1" in
  -) exit 1 ;;                                # "already installed?": no
  -m) echo "$*" >> "$PIP_LOG"; sleep 1.5 ;;   # pip install: a slow build that prints nothing
  -c) echo "llama_cpp 0.3-stand-in" ;;
esac
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _setup(tmp_path: Path, pip_fails: bool = False) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    python = (
        FAKE_PYTHON.replace("sleep 1.5 ;;", "sleep 1.5; exit 7 ;;") if pip_fails else FAKE_PYTHON
    )
    _executable(venv / "python", python)
    for tool in ("cmake", "g++"):
        _executable(venv / tool, "#!/bin/sh\n")
    # an empty cache: no llama.cpp that .ci/llama_server_setup.sh built, so pip builds it
    env = {**os.environ, "HEARTBEAT_S": "0.4", "PIP_LOG": str(tmp_path / "pip.log"),
           "PATH": f"{venv}:{os.environ['PATH']}",
           "ENVHUB_CACHE": str(tmp_path / "cache")}  # fmt: skip
    return subprocess.run(
        ["bash", str(REPO / ".ci" / "local_llm_setup.sh"), str(tmp_path / "venv")],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def test_the_llama_cpp_build_prints_a_line_every_few_seconds(tmp_path: Path) -> None:
    done = _setup(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    beats = re.findall(r"^local_llm_setup: building llama-cpp-python \(\d+ s\)\.\.\.$",
                       done.stdout, re.MULTILINE)  # fmt: skip
    assert len(beats) >= 2, done.stdout
    assert "llama-cpp-python[server]==" in (tmp_path / "pip.log").read_text()
    lines = done.stdout.splitlines()
    assert lines[-2].startswith("local_llm_setup: installed in")  # the beats stop with pip
    assert lines[-1] == "llama_cpp 0.3-stand-in"


def test_a_failed_build_still_fails_the_script(tmp_path: Path) -> None:
    failed = _setup(tmp_path, pip_fails=True)
    assert failed.returncode == 7, failed.stdout + failed.stderr
    assert "installed in" not in failed.stdout

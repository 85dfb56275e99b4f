"""The documented entry points run as documented (subprocesses, tiny model, CPU)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_importing_the_adapters_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, envhub.trainers, envhub.trainers.grpo, envhub.trainers.trl, "
        "envhub.trainers.verl, envhub.policies.token_policy; "
        "heavy = {'torch', 'transformers', 'trl', 'datasets', 'verl', 'skyrl_gym'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    assert run("-c", code).strip() == "[]"


# examples/train_grpo_trl.py --tiny runs in docs/tutorials/train.md, executed (with the same
# assertions) by tests/docs/test_tutorials.py::test_train


@pytest.mark.slow
def test_async_grpo_loop_example() -> None:
    pytest.importorskip("transformers")
    out = run("examples/async_grpo_loop.py", "--steps", "2", "--group-size", "2")
    steps = re.findall(
        r"^step (\d): reward [\d.]+ over 4 episodes.*trainer now at v(\d)", out, re.M
    )
    assert [s for s, _ in steps] == ["0", "1"], out

"""The bridges' test options, for the suites that run every environment (conformance,
gymnasium's ``check_env``): each bridge reaches the other project's own code through its
test assets (``environments/<bridge>/tests``) and the venv CI builds for it.

A missing venv skips those cases, unless CI's ``ENVHUB_REQUIRE_<BRIDGE>=1`` makes it a
failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPENENV_PYTHON = Path(os.environ.get("ENVHUB_OPENENV_PYTHON", ROOT / ".venv-openenv/bin/python"))
_OPENENV_TESTS = ROOT / "environments" / "openenv" / "tests"
_VF_TASKSETS = ROOT / "environments" / "verifiers" / "tests" / "vf_tasksets"


def unless_required(variable: str, problem: str) -> str:
    """Why a case skips, or a failure where CI's ``variable=1`` requires what it lacks."""
    if os.environ.get(variable) == "1":
        pytest.fail(f"{variable}=1 but {problem}")
    return problem


def openenv_adder() -> dict[str, Any]:
    """The bridge over OpenEnv's own server of the adder MCP environment, run from the
    OpenEnv venv (.ci/openenv_setup.sh)."""
    return {"command": [str(OPENENV_PYTHON), str(_OPENENV_TESTS / "openenv_servers.py"),
                        "adder", "--port", "{port}"],
            "tasks": str(_OPENENV_TESTS / "adder.jsonl")}  # fmt: skip


def openenv_problem() -> str | None:
    if OPENENV_PYTHON.exists():
        return None
    return unless_required("ENVHUB_REQUIRE_OPENENV",
                           f"no OpenEnv venv at {OPENENV_PYTHON} (bash .ci/openenv_setup.sh)")


def verifiers_guess() -> dict[str, Any]:
    """The bridge over the verifiers test taskset ``vf_guess`` (a multi-turn game)."""
    return {"taskset": "vf_guess", "path": str(_VF_TASKSETS)}


def verifiers_problem() -> str | None:
    from envhub_verifiers import default_python

    if default_python().exists():
        return None
    return unless_required("ENVHUB_REQUIRE_VERIFIERS",
                           f"no verifiers venv at {default_python()} (.ci/verifiers_setup.sh)")

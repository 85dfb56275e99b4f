"""The light path runs on the core install (issue 31): ``pip install envhub-rl envhub-rl-calc``
brings no extra, and ``envhub check calc`` and a reference-policy rollout must work there.

A fresh venv from wheels is .ci/wheels.sh's job (minutes); this is its fast twin: the CLI
runs in a child process in which every module outside the standard library and the
declared dependency closure of envhub-rl and envhub-rl-calc (extras left out) fails to
import, as it would on that install. It caught ``aiohttp`` imported through the rollout
engine's weight-sync module, which only model servers need."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_CORE_ONLY = """
import sys
from importlib.metadata import distribution, packages_distributions
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

seen, todo = set(), ["envhub-rl", "envhub-rl-calc"]
while todo:
    name = canonicalize_name(todo.pop())
    if name not in seen:
        seen.add(name)
        for line in distribution(name).requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
allowed = {module for module, dists in packages_distributions().items()
           if any(canonicalize_name(d) in seen for d in dists)}
allowed |= set(sys.stdlib_module_names) | {"envhub", "envhub_calc"}

class CoreInstallOnly:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in allowed and not top.startswith("_"):
            raise ModuleNotFoundError(f"No module named {top!r} (not on a core install)",
                                      name=top)
        return None

for module in [m for m in sys.modules if m.partition(".")[0] == "packaging"]:
    del sys.modules[module]  # packaging was only needed to read the metadata above
sys.meta_path.insert(0, CoreInstallOnly())
sys.argv = ["envhub", *sys.argv[1:]]
from envhub.cli import main
main()
"""


def _envhub_on_core_install(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _CORE_ONLY, *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO)  # fmt: skip


def test_check_runs_on_the_core_install() -> None:
    out = _envhub_on_core_install("check", "calc", "--tasks", "test")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok:" in out.stderr and "reference scores 1" in out.stderr, out.stderr


def test_a_reference_rollout_runs_on_the_core_install(tmp_path: Path) -> None:
    output = tmp_path / "calc.jsonl"
    out = _envhub_on_core_install(
        "rollout", "calc", "--policy", "reference", "--tasks", "test0:4", "--group-size", "2",
        "-o", str(output),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(output.with_name("calc.jsonl.summary.json").read_text())
    assert summary["episodes"] == 8 and summary["mean_reward"] == 1.0, summary


def test_a_served_rollout_runs_on_the_core_install(tmp_path: Path) -> None:
    """The client side of ``--env-url`` on the core install: without aiohttp (no WebSocket
    client) the default transport is HTTP; the server is this process's (it has the
    server extra, as a host of ``envhub serve`` has)."""
    server_app = pytest.importorskip("envhub.server", reason="the server extra is not installed")
    from tests.rollout.scripted_server import ThreadedUvicorn

    output = tmp_path / "served.jsonl"
    with ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on") as env_server:
        out = _envhub_on_core_install(
            "rollout", "calc", "--policy", "reference", "--env-url", env_server.url,
            "--tasks", "test0:4", "--group-size", "2", "-o", str(output),
        )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(output.with_name("served.jsonl.summary.json").read_text())
    assert summary["episodes"] == 8 and summary["mean_reward"] == 1.0, summary


def test_serve_on_the_core_install_names_the_extra_it_needs() -> None:
    out = _envhub_on_core_install("serve", "calc", "--port", "0")
    assert out.returncode != 0
    assert "pip install 'envhub-rl[server]'" in out.stdout + out.stderr, out.stdout + out.stderr

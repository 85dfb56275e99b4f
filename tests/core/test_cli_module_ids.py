"""``module:Class`` ids on the command line import from the working directory (or
``--app-dir``), as with ``python -m``: the real ``envhub`` console script, run as a
subprocess from the module's own folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from envhub.testing import free_port, wait_for_http

ENVHUB = Path(sys.executable).with_name("envhub")  # the console script of this venv

MODULE = '''
from envhub import Environment, GoldCall, Task, TaskSet, tool


class MyEnv(Environment):
    name = "myenv"

    def load_tasks(self) -> TaskSet:
        gold = [GoldCall(name="greet", arguments={"text": "hi"})]
        prompt = [{"role": "user", "content": "say hi"}]
        return TaskSet([Task(id="hi", prompt=prompt, gold_actions=gold)])

    @tool(terminal=True)
    def greet(self, text: str) -> str:
        """Greet.

        Args:
            text: The greeting.
        """
        self.said = text
        return "ok"

    def reward(self) -> float:
        return float(getattr(self, "said", None) == "hi")
'''


def _env() -> dict[str, str]:
    """This environment without PYTHONPATH, so only the working directory can help."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _envhub(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENVHUB), *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "mymod.py").write_text(MODULE)
    return tmp_path


def test_info_and_check_import_from_the_working_directory(folder: Path) -> None:
    info = _envhub("info", "mymod:MyEnv", "--json", cwd=folder)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["name"] == "myenv"
    check = _envhub("check", "mymod:MyEnv", cwd=folder)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok" in check.stderr + check.stdout


def test_app_dir_names_another_folder(folder: Path) -> None:
    elsewhere = folder / "elsewhere"
    elsewhere.mkdir()
    missing = _envhub("info", "mymod:MyEnv", cwd=elsewhere)
    assert missing.returncode == 2 and "No module named 'mymod'" in missing.stderr
    found = _envhub("--app-dir", "..", "info", "mymod:MyEnv", "--json", cwd=elsewhere)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["tools"][0]["function"]["name"] == "greet"
    wrong = _envhub("--app-dir", "nowhere", "info", "mymod:MyEnv", cwd=elsewhere)
    assert wrong.returncode == 2 and "does not exist" in wrong.stderr


def test_serve_hosts_a_module_from_the_working_directory(folder: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [str(ENVHUB), "serve", "mymod:MyEnv", "--port", str(port), "--log-level", "warning"],
        cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        if not wait_for_http(f"{url}/v1/environments", timeout_s=60,
                             gone=lambda: server.poll() is not None):  # fmt: skip
            said = server.communicate()[0] if server.poll() is not None else "(still running)"
            pytest.fail(f"envhub serve did not answer: {said}")
        listing = httpx.get(f"{url}/v1/environments", timeout=5)
        assert [env["name"] for env in listing.json()["environments"]] == ["myenv"]
    finally:
        server.terminate()
        server.wait(timeout=30)

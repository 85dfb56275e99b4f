"""Policies and sandbox backends are plugins as environments are: a third-party
distribution that declares entry points in ``envhub.policies`` and ``envhub.sandboxes``
is pip-installed (into a folder of its own, put on the path of the processes that use it)
and used by name from the command line, beside envhub's own, which are found the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envhub.agents import AGENTS
from envhub.errors import InvalidRequest
from envhub.policies import POLICIES, PolicyConfig, make_policy, policy_names
from envhub.policies.tito import TITO_BACKENDS
from envhub.registry import load_plugin, plugin_names
from envhub.sandboxes import SandboxSpec, backend_names, make_sandbox, resolve_backend
from envhub.tokens.tool_call_parsers import TOOL_CALL_PARSERS
from envhub.trajectory import read_trajectories

PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "envhub-tiny-plugins"
version = "0.1.0"

[project.entry-points."envhub.policies"]
tiny = "envhub_tiny_plugins:AnswerPolicy"

[project.entry-points."envhub.sandboxes"]
tiny = "envhub_tiny_plugins:LoggedSandbox"
"""

MODULE = '''\
"""A policy that answers with the task's answer, and a local sandbox that logs its starts."""

import os

from envhub.policies import Completion, GenerateRequest, PolicyConfig
from envhub.sandboxes.local import LocalSandbox
from envhub.types import ToolCall


class AnswerPolicy:
    def __init__(self, config: PolicyConfig) -> None:
        sampling = config.sampling
        self.model = f"tiny:{config.model}:{sampling.temperature if sampling else None}"

    async def generate(self, request: GenerateRequest) -> Completion:
        call = ToolCall(id="a", name="answer", arguments={"value": str(request.task.answer)})
        return Completion(content=None, tool_calls=[call], finish_reason="tool_calls")

    async def aclose(self) -> None:
        pass


class LoggedSandbox(LocalSandbox):
    async def start(self):
        with open(os.environ["TINY_SANDBOX_LOG"], "a") as log:
            log.write(f"{self.spec.image}\\n")
        return await super().start()
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin distribution, built and installed by pip into a folder of its own (not
    the venv, so that no other test, on this worker or another, sees its names)."""
    root = tmp_path_factory.mktemp("tiny")
    source = root / "src"
    (source / "envhub_tiny_plugins").mkdir(parents=True)
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "envhub_tiny_plugins" / "__init__.py").write_text(MODULE)
    target = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True,
    )  # fmt: skip
    assert (target / "envhub_tiny_plugins-0.1.0.dist-info" / "entry_points.txt").exists()
    return target


def envhub_cli(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "envhub.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "200", **env},
    )


def test_a_plugin_policy_runs_from_the_cli(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "calc.jsonl"
    done = envhub_cli(
        site, "rollout", "calc", "--policy", "tiny", "--model", "m1", "--temperature", "0.5",
        "--tasks", "0:4", "-o", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    trajectories = list(read_trajectories(out))
    assert len(trajectories) == 4
    assert {t.model for t in trajectories} == {"tiny:m1:0.5"}  # the typed config reached it
    assert [t.reward for t in trajectories] == [1.0] * 4
    help_text = envhub_cli(site, "rollout", "--help").stdout
    assert "litellm|openai|reference|tiny|tito" in help_text
    assert "bwrap|docker|local|tiny" in help_text
    unknown = envhub_cli(site, "rollout", "calc", "--policy", "nope", "-o", str(out))
    assert unknown.returncode == 2
    assert "unknown policy 'nope'; choose one of litellm, openai, reference, tiny, tito" in (
        " ".join(unknown.stderr.split())
    )


def test_a_plugin_sandbox_backend_runs_an_environment_from_the_cli(
    site: Path, tmp_path: Path
) -> None:
    """``--sandbox tiny`` sets the sql environment's ``sandbox`` option: its queries run in
    the plugin's sandbox, and the episodes score as in any other backend."""
    log, out = tmp_path / "starts.log", tmp_path / "sql.jsonl"
    done = envhub_cli(
        site, "rollout", "sql", "--policy", "reference", "--sandbox", "tiny",
        "--tasks", "0:2", "-o", str(out), TINY_SANDBOX_LOG=str(log),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().splitlines() == ["python", "python"]  # one sandbox per session
    assert [t.reward for t in read_trajectories(out)] == [1.0, 1.0]
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    assert summary["scored"] == 2


def test_in_process_names_come_from_the_entry_points(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "tiny" not in policy_names() and "tiny" not in backend_names()
    monkeypatch.syspath_prepend(str(site))
    assert policy_names() == ["litellm", "openai", "reference", "tiny", "tito"]
    assert backend_names() == ["bwrap", "docker", "local", "tiny"]
    assert resolve_backend(" TINY ") == "tiny"
    sandbox = make_sandbox(SandboxSpec(), "tiny")
    assert type(sandbox).__name__ == "LoggedSandbox"
    assert make_policy("tiny", model="m").model == "tiny:m:None"
    monkeypatch.setenv("ENVHUB_BLOCK_PLUGINS", "tiny")
    assert "tiny" not in policy_names()
    with pytest.raises(InvalidRequest, match="unknown sandbox backend 'tiny'"):
        resolve_backend("tiny")


def test_every_kind_lists_envhubs_own_and_takes_module_names() -> None:
    assert plugin_names(AGENTS) == ["openai-agents"]
    assert plugin_names(TITO_BACKENDS) == ["llama.cpp", "sglang", "vllm"]
    assert plugin_names(TOOL_CALL_PARSERS) == ["hermes", "llama3_json"]
    assert load_plugin(POLICIES, "envhub.policies.reference:ReferencePolicy.from_config")
    with pytest.raises(InvalidRequest, match=r"policy 'no\.such:Policy' failed to import"):
        load_plugin(POLICIES, "no.such:Policy")
    with pytest.raises(InvalidRequest, match="is not a class or a function"):
        load_plugin(POLICIES, "envhub.policies.factory:POLICIES")
    with pytest.raises(InvalidRequest, match=r"'builtins:str' built .*, which is not an envhub"):
        make_policy("builtins:str")
    with pytest.raises(InvalidRequest, match="the openai policy needs at least one --base-url"):
        load_plugin(POLICIES, "openai")(PolicyConfig(model="m"))

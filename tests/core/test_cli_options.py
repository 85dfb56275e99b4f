"""Options shared by the commands that take an environment."""

import os
from pathlib import Path
from typing import ClassVar

import pytest
import typer
from typer.testing import CliRunner

from envhub import Environment, GoldCall, Task, TaskSet, tool
from envhub.cli import app
from envhub.cli.options import env_options, parse_env_args


def test_env_args_parse_json_values() -> None:
    assert parse_env_args(["mode=text", "k=5", "flag=true", "path=/a=b", 'x={"a": 1}']) == {
        "mode": "text",
        "k": 5,
        "flag": True,
        "path": "/a=b",
        "x": {"a": 1},
    }
    with pytest.raises(typer.BadParameter, match="KEY=VALUE"):
        parse_env_args(["novalue"])


class SandboxedEnv(Environment):
    """Declares a ``sandbox`` option and records what each instance was given."""

    name = "sandboxed"
    given: ClassVar[list[str | None]] = []

    def __init__(self, sandbox: str | None = None) -> None:
        super().__init__()
        SandboxedEnv.given.append(sandbox)

    def load_tasks(self) -> TaskSet:
        gold = [GoldCall(name="say", arguments={"text": "hi"})]
        return TaskSet([Task(id="hi", prompt=[{"role": "user", "content": "hi"}],
                             gold_actions=gold)])  # fmt: skip

    @tool(terminal=True)
    def say(self, text: str) -> str:
        """Say something.

        Args:
            text: What to say.
        """
        self.said = text
        return "ok"

    def reward(self) -> float:
        return float(getattr(self, "said", None) == "hi")


SANDBOXED = f"{__name__}:SandboxedEnv"


def test_sandbox_flag_is_an_environment_option_not_process_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    before = dict(os.environ)
    SandboxedEnv.given.clear()
    result = CliRunner().invoke(app, ["check", SANDBOXED, "--sandbox", "bwrap"])
    assert result.exit_code == 0, result.output
    assert SandboxedEnv.given and set(SandboxedEnv.given) == {"bwrap"}
    assert dict(os.environ) == before


def test_sandbox_reaches_only_the_environments_that_declare_it() -> None:
    assert env_options(["calc", SANDBOXED], ["seed=3"], "docker") == [
        {"seed": 3},
        {"seed": 3, "sandbox": "docker"},
    ]
    assert env_options(["calc", "no-such-env"], ["seed=3"], None) == [{"seed": 3}] * 2
    with pytest.raises(typer.BadParameter, match="calc declares no sandbox option"):
        env_options(["calc"], [], "docker")
    with pytest.raises(typer.BadParameter, match="give the backend once"):
        env_options([SANDBOXED], ["sandbox=local"], "docker")
    with pytest.raises(typer.BadParameter, match="unknown environment 'no-such-env'"):
        env_options(["no-such-env"], [], "docker")


def test_sandbox_is_refused_with_a_server(tmp_path: Path) -> None:
    """``--env-url`` sends --env-arg options as client options, and a server refuses
    ``sandbox`` from clients: the flag is refused before anything is sent."""
    result = CliRunner().invoke(
        app,
        ["rollout", "calc", "--env-url", "http://127.0.0.1:9", "--sandbox", "local",
         "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "-o", str(tmp_path / "t")],
    )  # fmt: skip
    assert result.exit_code == 2 and "drop --sandbox" in result.output


def test_check_rejects_unknown_sandbox() -> None:
    result = CliRunner().invoke(app, ["check", "calc", "--tasks", "0:2", "--sandbox", "vm"])
    assert result.exit_code == 2 and "unknown sandbox backend 'vm'" in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["check", "calc"],
        ["info", "calc"],
        ["serve", "calc", "--port", "9"],
        ["mcp", "calc"],
        ["rollout", "calc", "--policy", "reference", "-o", "unused.jsonl"],
    ],
)
def test_env_arg_of_the_wrong_type_is_a_one_line_error(command: list[str]) -> None:
    """Every command that takes --env-arg checks it against the constructor's annotation
    (calc's ``num_tasks: int``) before building anything: one line naming the option, the
    value and the expected type, exit 2, no traceback."""
    result = CliRunner().invoke(app, [*command, "--env-arg", "num_tasks=abc"])
    assert result.exit_code == 2, result.output
    assert "option 'num_tasks' of calc: expected int, got 'abc'" in result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output


def test_env_arg_of_the_right_type_still_reaches_the_environment() -> None:
    result = CliRunner().invoke(app, ["check", "calc", "--env-arg", "num_tasks=4"])
    assert result.exit_code == 0 and "ok: 4 tasks of calc" in result.output

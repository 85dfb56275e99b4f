"""Options shared by the commands that take an environment."""

import os

import pytest
import typer
from typer.testing import CliRunner

from envhub.cli import app
from envhub.cli.options import parse_env_args, use_sandbox_backend


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


def test_sandbox_flag_sets_the_process_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from envhub.sandboxes import resolve_backend

    monkeypatch.setenv("ENVHUB_SANDBOX", "local")  # restored (or removed) after the test
    use_sandbox_backend("bwrap")
    assert os.environ["ENVHUB_SANDBOX"] == "bwrap" and resolve_backend(None) == "bwrap"
    with pytest.raises(typer.BadParameter, match="unknown backend"):
        use_sandbox_backend("vm")


def test_check_rejects_unknown_sandbox() -> None:
    result = CliRunner().invoke(app, ["check", "calc", "--tasks", "0:2", "--sandbox", "vm"])
    assert result.exit_code == 2 and "unknown backend" in result.output

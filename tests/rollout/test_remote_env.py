"""Rollouts against an environment hosted by ``envhub serve`` (``--env-url``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import envhub.cli.rollout  # noqa: F401 - registers the commands on the app
from envhub.cli._app import app
from envhub.trajectory import read_records
from tests.rollout.scripted_server import ScriptConfig, ThreadedUvicorn

server_app = pytest.importorskip("envhub.server", reason="the server extra is not installed")


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_rollout_against_a_remote_environment(scripted, tmp_path: Path, transport: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    model = scripted(ScriptConfig(token_ids=True))
    out = tmp_path / "remote.jsonl"
    monkeypatch.setenv("ENVHUB_TOKEN", "s3cret")  # the server's and the client's
    hosted = server_app.create_app(["calc"], token="s3cret")
    with ThreadedUvicorn(hosted, lifespan="on") as env_server:
        result = CliRunner().invoke(app, [
            "rollout", "calc", "--env-url", env_server.url, "--env-transport", transport,
            "--model", "scripted", "--base-url", model.base_url, "--tasks", "test[0:4]",
            "--group-size", "2", "--max-turns", "2", "--output", str(out),
        ])  # fmt: skip
    assert result.exit_code == 0, result.output
    records = list(read_records(out))
    assert len(records) == 8
    for record in records:
        assert not record["masked"]
        assert record["stop_reason"] == "max_turns"  # the runner's cap: 2 of the 3 scripted turns
        assert len(record["turns"]) == 2 and record["messages"][3]["content"] == "5"
        assert record["env"]["name"] == "calc" and record["env"]["version"] != "unknown"
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    assert summary["episodes"] == 8


def test_reference_policy_needs_an_in_process_environment(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "rollout", "calc", "--env-url", "http://127.0.0.1:9", "--policy", "reference",
        "--output", str(tmp_path / "x.jsonl"),
    ])  # fmt: skip
    assert result.exit_code == 2 and "drop --env-url" in result.output

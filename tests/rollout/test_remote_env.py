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


def _rollout(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["rollout", "calc", "--policy", "reference", *args])
    return result.exit_code, result.output


def test_reference_policy_replays_gold_actions_on_a_server(tmp_path: Path) -> None:
    """A server publishes no gold actions: they come from the plugin installed here."""
    out = tmp_path / "ref.jsonl"
    with ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on") as env_server:
        code, output = _rollout("--env-url", env_server.url, "--tasks", "test[0:6]",
                                "--output", str(out))
    assert code == 0, output
    records = list(read_records(out))
    assert len(records) == 6
    assert all(r["reward"] == 1.0 and r["served_by"] == env_server.url for r in records)


def test_a_static_pool_spreads_episodes_and_reports_them_per_server(tmp_path: Path) -> None:
    out = tmp_path / "pool.jsonl"
    with ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on") as first, \
            ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on") as second:
        code, output = _rollout("--env-url", first.url, "--env-url", second.url,
                                "--tasks", "test[0:20]", "--group-size", "2",
                                "--concurrency", "8", "--output", str(out))
    assert code == 0, output
    records = list(read_records(out))
    assert len({(r["task_id"], r["sample_index"]) for r in records}) == len(records) == 40
    assert all(r["reward"] == 1.0 for r in records)
    by_replica = json.loads(Path(f"{out}.summary.json").read_text())["by_replica"]
    assert set(by_replica) == {first.url, second.url}  # both served (8 in flight, 2 choices)
    assert sum(c["episodes"] for c in by_replica.values()) == 40
    assert f"on {first.url}" in output and f"on {second.url}" in output


def test_check_runs_on_servers_with_the_local_gold_actions() -> None:
    with ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on") as first, \
            ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on") as second:
        result = CliRunner().invoke(app, ["check", "calc", "--tasks", "test[0:8]",
                                          "--env-url", first.url, "--env-url", second.url])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output and "8 tasks" in result.output


def test_a_server_running_another_version_is_refused(tmp_path: Path) -> None:
    """Gold actions of another version would score wrongly: refused before any episode."""
    from envhub_calc.env import CalcEnv

    from envhub.clients.local import LocalEnvironment

    class NewerCalc(CalcEnv):
        version = "9.9.9"

    hosted = server_app.create_app({"calc": LocalEnvironment(NewerCalc)})
    with ThreadedUvicorn(hosted, lifespan="on") as env_server:
        code, output = _rollout("--env-url", env_server.url, "--output", str(tmp_path / "x"))
    assert code == 2 and "install the servers' version" in output, output
    assert not (tmp_path / "x").exists()


def test_env_url_and_env_fleet_together_are_refused(tmp_path: Path) -> None:
    code, output = _rollout("--env-url", "http://127.0.0.1:9", "--env-fleet", "127.0.0.1:6379",
                            "--output", str(tmp_path / "x.jsonl"))
    assert code == 2 and "give one" in output

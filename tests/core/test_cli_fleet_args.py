"""``envhub fleet up``'s argument syntax: ``--env ENV=COUNT``, ``--env-arg
[ENV:]KEY=VALUE`` and ``--resources [ENV=]JSON`` (parsed without Ray), and its refusal to
start a fleet without ``--token`` unless ``--insecure``."""

from __future__ import annotations

import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from envhub.cli import app
from envhub.cli.fleet import parse_env_args_by_env, parse_replica_counts, parse_resources
from envhub.testing import free_port


def test_replica_counts() -> None:
    assert parse_replica_counts(["sql=4", "calc", "mod:Env=2"]) == {
        "sql": 4, "calc": 1, "mod:Env": 2}  # fmt: skip
    for bad in (["sql=0"], ["sql=x"], ["=3"], ["sql=1", "sql=2"]):
        with pytest.raises(typer.BadParameter):
            parse_replica_counts(bad)


def test_env_args_go_to_one_env_or_to_all() -> None:
    envs = ["sql", "calc", "mod:Env"]
    parsed = parse_env_args_by_env(
        ["sql:sandbox=bwrap", "num_tasks=50", "mod:Env:mode=text", "calc:url=a=b"], envs
    )
    assert parsed == {
        "sql": {"sandbox": "bwrap", "num_tasks": 50},
        "calc": {"num_tasks": 50, "url": "a=b"},
        "mod:Env": {"num_tasks": 50, "mode": "text"},
    }
    with pytest.raises(typer.BadParameter, match="no --env starts"):
        parse_env_args_by_env(["swe:image=x"], envs)


def test_resources_default_and_per_env() -> None:
    default, by_env = parse_resources(
        ['{"num_cpus": 0.5}', 'sql={"sandbox_slots": 1, "num_cpus": 2}'], ["sql", "calc"]
    )
    assert default == {"num_cpus": 0.5}
    assert by_env == {"sql": {"sandbox_slots": 1.0, "num_cpus": 2.0}}
    for bad in (['{"num_cpus": "x"}'], ["[1]"], ['swe={"a": 1}'], ["sql=nope"]):
        with pytest.raises(typer.BadParameter):
            parse_resources(bad, ["sql", "calc"])


def _fleet_up(*args: str, token_env: str | None = None) -> Result:
    """``envhub fleet up`` of one calc replica on an address where no Ray head listens."""
    return CliRunner().invoke(
        app,
        ["fleet", "up", "--address", f"127.0.0.1:{free_port()}", "--env", "calc", *args],
        env={"ENVHUB_TOKEN": token_env},
    )


def test_up_without_a_token_is_refused_naming_both_ways_out() -> None:
    """Replicas serve on their nodes' network addresses: no token, no fleet, unless
    --insecure; refused before anything is reached (no Ray cluster needed)."""
    for refused in (_fleet_up(), _fleet_up(token_env="")):
        assert refused.exit_code == 2, refused.output
        assert "refusing to start a fleet without a token" in refused.output
        assert "--token" in refused.output and "--insecure" in refused.output
        assert "ENVHUB_TOKEN" in refused.output and "no Ray cluster" not in refused.output


@pytest.mark.parametrize(
    ("args", "token_env"),
    [(["--token", "s3cret"], None), ([], "s3cret"), (["--insecure"], None)],
    ids=["--token", "ENVHUB_TOKEN", "--insecure"],
)
def test_a_token_or_insecure_goes_on_to_the_cluster(args: list[str], token_env: str | None) -> None:
    result = _fleet_up(*args, token_env=token_env)
    assert "without a token" not in result.output
    # the next thing up does is reach the cluster (or find Ray missing)
    assert "no Ray cluster at 127.0.0.1:" in result.output or "envhub-rl[ray]" in result.output

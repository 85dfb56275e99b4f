"""``envhub fleet up``'s argument syntax: ``--env ENV=COUNT``, ``--env-arg
[ENV:]KEY=VALUE`` and ``--resources [ENV=]JSON`` (parsed without Ray)."""

from __future__ import annotations

import pytest
import typer

from envhub.cli.fleet import parse_env_args_by_env, parse_replica_counts, parse_resources


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

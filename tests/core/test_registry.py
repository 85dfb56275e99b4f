"""Discovery through real entry points (a throwaway distribution on sys.path)."""

import subprocess
import sys
from pathlib import Path

import pytest

import envhub
from envhub.clients.describe import describe_environment, describe_environments
from envhub.errors import RegistryError
from envhub.registry import discover_environments, load_environment_class

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 'broken' plugin whose module fails to import, installed as a dist-info on sys.path."""
    dist = tmp_path / "envhub_broken-0.3.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: envhub-broken\nVersion: 0.3.0\n")
    (dist / "entry_points.txt").write_text(
        "[envhub.environments]\nbroken = envhub_broken_mod:Env\ntoy = tests.core.toy_envs:ToyEnv\n"
        "counted = tests.core.toy_envs:CountedEnv\nneedy = tests.core.toy_envs:NeedsServerEnv\n"
    )
    (tmp_path / "envhub_broken_mod.py").write_text("raise ImportError('missing dependency xyz')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # listing builds every plugin it finds (reasoning_gym's import alone takes many
    # seconds); these tests are about the broken one beside two that work, so the other
    # installed plugins are blocked
    others = set(discover_environments()) - {"broken", "toy", "counted", "needy", "calc"}
    monkeypatch.setenv("ENVHUB_BLOCK_PLUGINS", ",".join(sorted(others)))
    return tmp_path


def test_listing_reports_broken_plugins(fake_plugins: Path) -> None:
    listings = {entry.name: entry for entry in describe_environments()}
    assert listings["broken"].error and "missing dependency xyz" in listings["broken"].error
    assert listings["broken"].version == "0.3.0" and listings["broken"].tools == []
    assert listings["toy"].error is None and listings["toy"].tasks == 6
    assert "add" in listings["toy"].tool_names and listings["toy"].budgets.max_turns > 0
    assert listings["calc"].tasks == 3000
    # one that needs an operator's option is not broken: the listing says what it needs
    assert listings["needy"].error is None
    assert listings["needy"].needs_options == "needy needs server= (the server it reaches)"


def test_blocking_a_plugin(fake_plugins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_BLOCK_PLUGINS", "broken, toy")
    found = discover_environments()
    assert "broken" not in found and "toy" not in found and "calc" in found


def test_unknown_and_module_ids() -> None:
    with pytest.raises(RegistryError, match="unknown environment 'nosuch'; choose one of"):
        load_environment_class("nosuch")
    with pytest.raises(RegistryError, match="failed to import"):
        load_environment_class("no.such.module:Env")
    with pytest.raises(RegistryError, match=r"not an envhub\.Environment"):
        load_environment_class("json:dumps")
    assert envhub.make("tests.core.toy_envs:ToyEnv").name == "toy"
    assert describe_environment("tests.core.toy_envs:ToyEnv").version == "1.2.3"
    assert describe_environment("tests.core.toy_envs:ToyEnv", {"greeting": "yo"}).options == {
        "greeting": "yo"
    }


def test_import_envhub_stays_light() -> None:
    code = (
        "import sys, envhub, envhub.fleet\n"
        "heavy = [m for m in ('fastapi', 'docker', 'torch', 'playwright', 'datasets', 'openai',"
        " 'gymnasium', 'uvicorn', 'ray', 'mcp') if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_cli_list_and_info(fake_plugins: Path) -> None:
    from typer.testing import CliRunner

    from envhub.cli import app

    runner = CliRunner()
    listed = runner.invoke(app, ["list", "--json"])
    assert (
        listed.exit_code == 0
        and '"broken"' in listed.stdout
        and "missing dependency xyz" in listed.stdout
    )
    info = runner.invoke(app, ["info", "toy", "--json", "--env-arg", "greeting=yo"])
    assert info.exit_code == 0, info.stdout
    assert '"yo 0"' in info.stdout and '"name": "add"' in info.stdout
    bad = runner.invoke(app, ["info", "toy", "--env-arg", "colour=red"])
    assert bad.exit_code == 2 and "bad options" in bad.stderr and not bad.stdout
    assert '"needs_options": "needy needs server= (the server it reaches)"' in listed.stdout
    table = runner.invoke(app, ["list"]).stdout
    assert "needy needs" in table and "OptionsRequired" not in table
    needy = runner.invoke(app, ["info", "needy"])
    assert needy.exit_code == 2 and needy.stderr.strip() == (
        "error: needy needs server= (the server it reaches)"
    )


def test_cli_list_counts_tasks_without_loading_them(fake_plugins: Path) -> None:
    """A plugin that declares its task counts is listed from them: ``envhub list`` never
    generates its tasks; ``envhub info`` still reports the loaded ones, and a count that
    disagrees with the loaded tasks fails once they load."""
    import json

    from typer.testing import CliRunner

    from envhub.cli import app
    from envhub.errors import EnvironmentFailure
    from tests.core.toy_envs import CountedEnv

    CountedEnv.loads = 0
    runner = CliRunner()
    listed = runner.invoke(app, ["list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["counted"]["tasks"] == 3 and rows["counted"]["splits"] == ["test", "train"]
    assert rows["counted"]["error"] is None and rows["toy"]["tasks"] == 6
    assert CountedEnv.loads == 0
    info = runner.invoke(app, ["info", "counted", "--json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.stdout)["splits"] == {"test": 1, "train": 2}
    assert CountedEnv.loads == 1
    with pytest.raises(EnvironmentFailure, match="task_counts"):
        envhub.make("counted", wrong=True).tasks  # noqa: B018


def test_discovery_is_cheap_and_describing_is_separate() -> None:
    """Discovery reads metadata only: no plugin module is imported. It lives apart from
    the module that builds environments to describe them, so the two cannot import each
    other in a cycle (the registry imports neither sessions nor LocalEnvironment)."""
    code = (
        "import sys, envhub\n"
        "found = envhub.discover_environments()\n"
        "assert {'calc', 'sql'} <= set(found), found\n"
        "loaded = [m for m in sys.modules if m.startswith('envhub_')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    import ast

    def imported_by(module: str) -> set[str | None]:
        tree = ast.parse((REPO / module.replace(".", "/")).with_suffix(".py").read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}

    registry = imported_by("envhub.registry")
    heavy = {"envhub.clients.local", "envhub.clients.describe", "envhub.runtime.session"}
    assert not registry & heavy, registry
    assert "envhub.clients.local" in imported_by("envhub.clients.describe")
    # not even inside a function:
    assert "envhub.clients.describe" not in imported_by("envhub.clients.local")

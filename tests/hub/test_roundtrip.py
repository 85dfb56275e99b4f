"""The hub round trip against a real index (issue 32): ``envhub publish`` calc and a plugin
made by ``envhub init`` to a ``pypiserver`` on 127.0.0.1 (a plugin whose check fails is
refused and nothing is uploaded), ``envhub search`` and ``envhub info`` read their cards
without installing, and ``envhub install`` puts one into a fresh venv, whose core came
from the same index, where ``envhub check`` and a reference rollout run it.

The fresh venv is made once, in a thread started with the module, while the publishing
runs; its dependencies come from the machine's pip configuration and cache, as in
.ci/wheels.sh. One module, so one xdist worker runs all of it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.hub.indexes import (
    REPO,
    finish,
    one_line_error,
    pypiserver,
    run_envhub,
    start_envhub,
    write_wheel,
)

VERSION = (REPO / "VERSION").read_text().strip()
CREDENTIALS = {"TWINE_USERNAME": "team", "TWINE_PASSWORD": "not-printed-3141"}


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("packages")


@pytest.fixture(scope="module")
def index(packages: Path) -> Iterator[str]:
    with pypiserver(packages) as url:
        yield url


def _core_wheel(out: Path, work: Path) -> None:
    """envhub-rl's wheel, built from a copy of the checkout's files."""
    listed = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(listed, cwd=REPO, capture_output=True, text=True, check=True)
    for name in files.stdout.split():
        if (REPO / name).is_file() and not name.startswith(("tests/", "environments/", "docs/")):
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, work / name)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(out), str(work)], check=True, capture_output=True)  # fmt: skip


def _fresh_venv(where: Path, packages: Path, index: str) -> Path:
    """A venv with pip, envhub-rl from ``index`` (its dependencies from pip's configuration
    and cache) and an old ``hubdep``; returns its python. This pip installs them into it
    (``--python``): a third of the CPU of ensurepip and then the venv's own pip."""
    _core_wheel(packages, where / "core")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")], check=True)
    python = where / "venv" / "bin" / "python"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--disable-pip-version-check", "--no-compile", "--extra-index-url", index,
         "pip", f"envhub-rl=={VERSION}", "hubdep==1.0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    return python


@pytest.fixture(scope="module")
def venv_python(
    tmp_path_factory: pytest.TempPathFactory, packages: Path, index: str
) -> Iterator[Future[Path]]:
    """The fresh venv's python, made in the background from the module's start."""
    for version in ("1.0", "2.0"):
        write_wheel(packages, "hubdep", version)
    # a plugin needing a newer hubdep than the venv has, and one needing a future envhub
    for name, requires, envhub_range in [("needsdep", ("hubdep>=2",), ""),
                                         ("future", (), ">=99")]:  # fmt: skip
        card = {"card_schema": 1, "distribution": f"envhub-rl-{name}", "version": "1.0",
                "requires_envhub": envhub_range, "checked_with": VERSION,
                "environments": []}  # fmt: skip
        write_wheel(packages, f"envhub-rl-{name}", "1.0", requires=requires,
                    card=json.dumps(card).encode())  # fmt: skip
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(_fresh_venv, tmp_path_factory.mktemp("fresh"), packages, index)


def _in_venv(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``envhub ARGS`` in the fresh venv: nothing of the checkout on its path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), "-m", "envhub.cli", *args], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, env=env, cwd=python.parents[2],
                          timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def published(
    venv_python: Future[Path], index: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, subprocess.CompletedProcess[str]]:
    """``envhub publish`` of calc, of an ``envhub init`` plugin and of one whose gold
    answer is wrong (all three at once); by name."""
    work = tmp_path_factory.mktemp("plugins")
    for name in ("hubdemo", "hubbroken"):
        made = run_envhub("init", name, "--dir", str(work / name))
        assert made.returncode == 0, made.stderr
    tasks = work / "hubbroken" / "envhub_hubbroken" / "tasks.jsonl"
    tasks.write_text(tasks.read_text().replace('"answer": "8"', '"answer": "9"', 1))
    started = {
        name: start_envhub("publish", str(path), "--index", index, env=CREDENTIALS)
        for name, path in [("calc", REPO / "environments" / "calc"),
                           ("hubbroken", work / "hubbroken")]
    }  # fmt: skip
    # the default PATH, ".": the plugin's own folder, whose source package must not
    # shadow the built wheel in the check
    started["hubdemo"] = start_envhub("publish", "--index", index, env=CREDENTIALS,
                                      cwd=work / "hubdemo")  # fmt: skip
    return {name: finish(proc) for name, proc in started.items()}


def test_publish_uploads_checked_plugins(published: dict[str, subprocess.CompletedProcess[str]],
                                         packages: Path) -> None:  # fmt: skip
    for name, tasks in (("calc", 3000), ("hubdemo", 3)):
        run = published[name]
        assert run.returncode == 0, run.stderr
        assert f"published envhub-rl-{name} " in run.stdout, run.stdout
        assert f"{name} ({tasks} tasks, check ok)" in run.stdout, run.stdout
        assert CREDENTIALS["TWINE_PASSWORD"] not in run.stdout + run.stderr
    files = {path.name for path in packages.iterdir()}
    assert {f"envhub_rl_calc-{VERSION}-py3-none-any.whl", f"envhub_rl_calc-{VERSION}.tar.gz",
            "envhub_rl_hubdemo-0.1.0-py3-none-any.whl"} <= files  # fmt: skip
    assert not (REPO / "environments" / "calc" / "dist").exists()  # built from a copy


def test_a_plugin_failing_its_check_is_refused_and_nothing_uploaded(
    published: dict[str, subprocess.CompletedProcess[str]], packages: Path, index: str
) -> None:
    error = one_line_error(published["hubbroken"])
    assert "envhub check failed on hubbroken: hubbroken-1" in error
    assert "nothing was uploaded" in error
    assert not [path for path in packages.iterdir() if "hubbroken" in path.name]
    missing = one_line_error(run_envhub("info", "envhub-rl-hubbroken", "--index", index))
    assert "has no envhub-rl-hubbroken" in missing


def test_search_finds_both_with_their_cards(
    published: dict[str, subprocess.CompletedProcess[str]], index: str
) -> None:
    found = run_envhub("search", "--json", env={"ENVHUB_INDEX_URL": index})  # the one setting
    assert found.returncode == 0, found.stderr
    cards = {card["distribution"]: card for card in json.loads(found.stdout)}
    assert {"envhub-rl-calc", "envhub-rl-hubdemo"} <= set(cards)  # hubdep is no plugin
    calc, demo = cards["envhub-rl-calc"], cards["envhub-rl-hubdemo"]
    assert (calc["version"], calc["requires_envhub"]) == (VERSION, ">=0.2")
    assert calc["checked_with"] == VERSION
    [env] = calc["environments"]
    assert env["tasks"] == {"test": 600, "train": 2400}
    assert [t["function"]["name"] for t in env["tools"]] == ["answer", "calculate"]
    assert env["check"] == {"ok": True, "checked": 3000, "failing_tasks": [], "tool_gaps": []}
    assert sorted(env["client_options"]) == ["num_tasks", "seed"]
    assert demo["environments"][0]["tasks"] == {"test": 1, "train": 2}
    text = run_envhub("search", "calc", "--index", index)
    assert f"envhub-rl-calc {VERSION}: envhub starter environment" in text.stdout
    assert "calc: 3000 tasks (test 600, train 2400); tools answer, calculate" in text.stdout
    assert "hubdemo" not in text.stdout


def test_info_reads_a_card_without_installing(
    published: dict[str, subprocess.CompletedProcess[str]], index: str
) -> None:
    shown = run_envhub("info", "envhub-rl-hubdemo==0.1.0", "--index", index)
    assert shown.returncode == 0, shown.stderr
    assert "envhub-rl-hubdemo 0.1.0: envhub environment: hubdemo" in shown.stdout
    assert "environment hubdemo 0.1.0: 3 tasks (test 1, train 2), check ok on 3" in shown.stdout
    assert "answer: string" in shown.stdout  # the submit tool's parameter
    assert importlib.util.find_spec("envhub_hubdemo") is None  # nothing was installed


def test_install_into_a_fresh_venv_then_check_and_roll_out(
    published: dict[str, subprocess.CompletedProcess[str]], venv_python: Future[Path], index: str
) -> None:
    python = venv_python.result(timeout=300)
    installed = _in_venv(python, "install", "envhub-rl-hubdemo", "--index", index)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "pip would install envhub-rl-hubdemo 0.1.0" in installed.stderr  # what pip would change
    assert "installed envhub-rl-hubdemo 0.1.0 (hubdemo)" in installed.stdout
    assert "ok: 3 tasks of hubdemo" in installed.stderr  # envhub check --limit, afterwards
    run = _in_venv(python, "rollout", "hubdemo", "--policy", "reference", "--tasks", "train",
                   "--group-size", "2", "-o", "demo.jsonl")  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads((python.parents[2] / "demo.jsonl.summary.json").read_text())
    assert summary["episodes"] == 4 and summary["mean_reward"] == 1.0, summary


def test_install_asks_before_changing_installed_packages(
    venv_python: Future[Path], index: str
) -> None:
    python = venv_python.result(timeout=300)
    refused = _in_venv(python, "install", "envhub-rl-needsdep", "--index", index)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    plan, error = refused.stderr.strip().rsplit("\n", 1)
    assert "pip would upgrade hubdep 1.0 -> 2.0" in plan
    assert "would change installed packages (hubdep 1.0 -> 2.0); pass --yes" in error
    allowed = _in_venv(python, "install", "envhub-rl-needsdep", "--index", index, "--yes",
                       "--check-limit", "0")  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert "pip would upgrade hubdep 1.0 -> 2.0" in allowed.stderr
    shown = subprocess.run([str(python), "-m", "pip", "show", "hubdep"], capture_output=True,
                           text=True)  # fmt: skip
    assert "Version: 2.0" in shown.stdout


def test_install_refuses_a_plugin_for_another_envhub(venv_python: Future[Path], index: str) -> None:
    python = venv_python.result(timeout=300)
    error = one_line_error(_in_venv(python, "install", "envhub-rl-future", "--index", index))
    assert f"needs envhub-rl>=99; this environment runs envhub-rl {VERSION}" in error

"""Pinned runs (issue 32): trajectories and summaries record the environment's
distribution, version and task-set hash, in-process and from a server; ``envhub rollout
ENV==VERSION`` refuses another version before any episode; ``--resume`` refuses a file
written from another task set, and resumes one written before pins with a warning.

The CLI runs in a subprocess where it matters that the hash is the same in another
process (the resume refusal compares the hash a child wrote with one computed here)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import envhub
import envhub.cli.rollout  # registers the commands on the app
from envhub.cli._app import app
from envhub.policies import ReferencePolicy
from envhub.rollout import PinWarning, run
from envhub.task import Task, TaskSet
from envhub.trajectory import read_records, read_trajectories
from tests.rollout.pins_env import ENV_ID
from tests.rollout.scripted_server import ThreadedUvicorn

ROOT = Path(__file__).resolve().parents[2]
CALC_VERSION = version("envhub-rl-calc")


def envhub_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envhub.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def write_tasks(path: Path, answers: list[str]) -> None:
    path.write_text("".join(json.dumps({
        "id": f"t{i}", "prompt": [{"role": "user", "content": f"question {i}"}], "answer": a,
        "gold_actions": [{"name": "answer", "arguments": {"value": a}}],
    }) + "\n" for i, a in enumerate(answers)))  # fmt: skip


def test_the_hash_covers_ids_prompts_answers_and_order() -> None:
    def tasks(**change: Any) -> TaskSet:
        rows = [{"id": "a", "prompt": [{"role": "user", "content": "1+1"}], "answer": "2"},
                {"id": "b", "prompt": [{"role": "user", "content": "2+2"}], "answer": "4"}]
        rows[0].update(change)
        return TaskSet.from_records(rows)

    base = tasks().content_hash()
    assert base.startswith("sha256:") and base == tasks().content_hash()
    changed = [
        tasks(answer="3"), tasks(prompt=[{"role": "user", "content": "1+2"}]), tasks(id="c"),
        tasks(split="test"), TaskSet(reversed(list(tasks()))),
    ]
    assert len({base, *(t.content_hash() for t in changed)}) == 1 + len(changed)


def test_trajectories_and_the_summary_carry_the_pins_in_process(tmp_path: Path) -> None:
    env = envhub.make("calc", num_tasks=20)
    out = tmp_path / "calc.jsonl"
    result = envhub.rollout.run_sync(env, ReferencePolicy(), "test[0:3]", output=out)
    expected = {"name": "calc", "version": env.version, "distribution": "envhub-rl-calc",
                "distribution_version": CALC_VERSION,
                "task_set_hash": env.tasks.content_hash()}  # fmt: skip
    assert [r["env"] for r in read_records(out)] == [expected] * 3
    assert result.summary.env is not None and result.summary.env.model_dump() == expected
    assert json.loads(Path(f"{out}.summary.json").read_text())["env"] == expected


def test_a_served_rollout_records_the_servers_pins_and_honours_a_pin(tmp_path: Path) -> None:
    """The server hosts calc with 40 tasks; the client's own calc has the default set: the
    trajectories carry the server's task-set hash, and a pin is checked against the
    version the server reports."""
    server = pytest.importorskip("envhub.server", reason="the server extra is not installed")
    served = envhub.make("calc", num_tasks=40)
    out = tmp_path / "remote.jsonl"
    with ThreadedUvicorn(server.create_app({"calc": served}), lifespan="on") as env_server:
        refused = CliRunner().invoke(app, [
            "rollout", "calc==0.0.1", "--env-url", env_server.url, "--policy", "reference",
            "--output", str(out),
        ])  # fmt: skip
        assert refused.exit_code == 2 and not out.exists(), refused.output
        assert f"runs from envhub-rl-calc {CALC_VERSION}" in refused.output
        ran = CliRunner().invoke(app, [
            "rollout", f"calc=={CALC_VERSION}", "--env-url", env_server.url,
            "--env-transport", "http", "--policy", "reference", "--tasks", "test[0:2]",
            "--output", str(out),
        ])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    hashes = {r.env.task_set_hash for r in read_trajectories(out)}
    assert hashes == {served.tasks.content_hash()}
    assert served.tasks.content_hash() != envhub.make("calc").tasks.content_hash()
    assert {r.env.distribution_version for r in read_trajectories(out)} == {CALC_VERSION}


def test_a_pin_on_another_version_is_refused_before_any_episode(tmp_path: Path) -> None:
    out = tmp_path / "pinned.jsonl"
    refused = envhub_cli("rollout", "calc==0.1.0", "--policy", "reference", "-o", str(out))
    assert refused.returncode == 2 and not out.exists()
    assert refused.stderr.strip() == (
        f"error: calc==0.1.0 is pinned, but calc runs from envhub-rl-calc {CALC_VERSION}; "
        "install the pinned version (pip install 'envhub-rl-calc==0.1.0', on the server "
        "with --env-url) or change the pin"
    )
    bad = envhub_cli("rollout", "calc==not-a-version", "--policy", "reference", "-o", str(out))
    assert bad.returncode == 2 and "is not a version specifier" in bad.stderr
    assert "Traceback" not in bad.stderr and not out.exists()
    write_tasks(tmp_path / "tasks.jsonl", ["a"])
    unpinnable = CliRunner().invoke(app, [
        "rollout", f"{ENV_ID}==1.0.0", "--env-arg", f"path={tmp_path / 'tasks.jsonl'}",
        "--policy", "reference", "-o", str(out),
    ])  # fmt: skip
    assert unpinnable.exit_code == 2 and "has no version to pin" in unpinnable.output


def test_resume_refuses_a_file_written_from_another_task_set(tmp_path: Path) -> None:
    """Run 1 (a child process) writes the file; the data file changes one answer; run 2
    (another child) refuses to resume it and names both hashes, each computed in a
    process of its own and here."""
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "run.jsonl"
    write_tasks(tasks, ["a", "b", "c"])
    first_hash = TaskSet.from_jsonl(tasks).content_hash()
    rollout = ["rollout", ENV_ID, "--env-arg", f"path={tasks}", "--policy", "reference",
               "--output", str(out)]  # fmt: skip
    first = envhub_cli(*rollout, "--tasks", "0:1")
    assert first.returncode == 0, first.stderr
    assert [r["env"]["task_set_hash"] for r in read_records(out)] == [first_hash]

    write_tasks(tasks, ["a", "b", "C"])
    second_hash = TaskSet.from_jsonl(tasks).content_hash()
    before = out.read_bytes()
    refused = envhub_cli(*rollout, "--tasks", "0:3", "--resume")
    assert refused.returncode == 2 and out.read_bytes() == before
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out} was written from task set "
                                                   f"{first_hash}, but file-tasks"), lines
    assert f"has task set {second_hash}: resuming would mix two task sets" in lines[0]

    records = list(read_records(out))  # as if written before pins: resumed, with a warning
    for record in records:
        record["env"] = {"name": record["env"]["name"], "version": record["env"]["version"]}
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    resumed = envhub_cli(*rollout, "--tasks", "0:3", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.startswith(f"warning: {out} has records without a task-set hash")
    assert [r["env"].get("task_set_hash") for r in read_records(out)] == [None, *[second_hash] * 2]


def test_a_file_without_pins_resumes_with_a_warning_and_new_records_carry_them(
    tmp_path: Path,
) -> None:
    env = envhub.make("calc", num_tasks=20)
    out = tmp_path / "old.jsonl"
    envhub.rollout.run_sync(env, ReferencePolicy(), "test[0:2]", output=out)
    records = list(read_records(out))
    for record in records:  # as envhub wrote them before pins (schema_version 1 still)
        record["env"] = {"name": "calc", "version": "0.1.0"}
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [t.env.task_set_hash for t in read_trajectories(out)] == [None, None]

    with pytest.warns(PinWarning, match="records without a task-set hash"):
        envhub.rollout.run_sync(env, ReferencePolicy(), "test[0:3]", output=out, resume=True)
    pinned = [r["env"].get("task_set_hash") for r in read_records(out)]
    assert pinned == [None, None, env.tasks.content_hash()]


def test_another_version_on_the_same_task_set_resumes_with_a_warning(tmp_path: Path) -> None:
    env = envhub.make("calc", num_tasks=20)
    out = tmp_path / "versions.jsonl"
    envhub.rollout.run_sync(env, ReferencePolicy(), "test[0:1]", output=out)
    record = next(read_records(out))
    record["env"]["distribution_version"] = "0.0.9"
    out.write_text(json.dumps(record) + "\n")
    with pytest.warns(PinWarning, match=f"written by envhub-rl-calc 0.0.9; this run uses "
                                        f"envhub-rl-calc {CALC_VERSION} on the same task set"):
        summary = envhub.rollout.run_sync(
            env, ReferencePolicy(), "test[0:2]", output=out, resume=True
        ).summary
    assert summary.episodes == 2 and summary.env is not None
    assert summary.env.distribution_version == CALC_VERSION


async def test_a_pin_is_checked_by_the_python_api_too() -> None:
    env = envhub.make("calc", num_tasks=20)
    with pytest.raises(envhub.errors.InvalidRequest, match="calc>=99 is pinned"):
        await run(env, ReferencePolicy(), "test[0:1]", pin=">=99")
    result = await run(env, ReferencePolicy(), "test[0:1]", pin=f"~={CALC_VERSION}")
    assert result.trajectories and result.trajectories[0].env.distribution == "envhub-rl-calc"


def test_a_task_without_json_types_still_hashes() -> None:
    """An answer may be any Python object (a plugin's own type): it hashes by its repr
    rather than failing the run."""
    odd = TaskSet([Task(id="x", prompt=[], answer=complex(1, 2))])
    assert odd.content_hash() != TaskSet([Task(id="x", prompt=[], answer=2)]).content_hash()

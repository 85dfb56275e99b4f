"""``envhub rollout|check|export`` end to end (scripted server for the model)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import envhub.cli.rollout  # noqa: F401 - registers the commands on the app
from envhub.cli._app import app
from envhub.trajectory import read_records
from tests.rollout.helpers import wait_for_lines
from tests.rollout.scripted_server import ScriptConfig

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import envhub.cli.rollout; from envhub.cli import main; main()"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_rollout_against_a_scripted_server_writes_trajectories_and_summary(
    scripted, tmp_path: Path
) -> None:
    server = scripted(ScriptConfig(token_ids=True, session_header="x-group"))
    out = tmp_path / "calc.jsonl"
    code, output = invoke(
        "rollout",
        "calc",
        "--model",
        "scripted",
        "--base-url",
        server.base_url,
        "--tasks",
        "0:5",
        "--group-size",
        "3",
        "--concurrency",
        "4",
        "--temperature",
        "0.7",
        "--max-tokens",
        "64",
        "--policy-version",
        "3",
        "--routing",
        "group",
        "--session-header",
        "X-Group",
        "--output",
        str(out),
        "--env-arg",
        "num_tasks=100",
    )
    assert code == 0, output
    records = list(read_records(out))
    assert len(records) == 15
    # group routing: each request carried its group's id in the named header
    assert server.stats.sessions == {r["group_id"]: 9 for r in records}  # 3 samples x 3 turns
    assert {t["endpoint"] for r in records for t in r["turns"]} == {server.base_url}
    assert {(r["task_id"], r["sample_index"]) for r in records} == {
        (f"calc-0-{i:05d}", s) for i in (4, 9, 14, 19, 24) for s in range(3)
    }
    assert records[0]["sampling"] == {"temperature": 0.7, "top_p": 1.0, "max_tokens": 64}
    assert all(t["policy_version"] == 3 for r in records for t in r["turns"])
    summary = json.loads((tmp_path / "calc.jsonl.summary.json").read_text())
    assert summary["episodes"] == 15 and summary["mean_reward"] == 0.0
    assert set(summary["pass_at_k"]) == {"pass@1", "pass@2", "pass@3"}
    assert "pass@3" in output and "mean reward" in output
    # a second run without --resume refuses to touch the file
    code, output = invoke("rollout", "calc", "--policy", "reference", "--output", str(out))
    assert code == 2 and "--resume" in output


def test_rollout_without_a_server_explains_how_to_get_one(tmp_path: Path) -> None:
    code, output = invoke("rollout", "calc", "--model", "m", "--output", str(tmp_path / "x.jsonl"))
    assert code == 2
    assert "envhub llm serve" in output and "--policy reference" in output


def test_reference_rollout_and_export(tmp_path: Path) -> None:
    out = tmp_path / "ref.jsonl"
    code, output = invoke(
        "rollout",
        "calc",
        "--policy",
        "reference",
        "--tasks",
        "calc-0-00001,calc-0-00002",
        "--group-size",
        "2",
        "--output",
        str(out),
    )
    assert code == 0, output
    summary = json.loads((tmp_path / "ref.jsonl.summary.json").read_text())
    assert summary["mean_reward"] == 1.0 and summary["pass_at_k"]["pass@1"] == 1.0
    code, output = invoke(
        "export", str(out), "--format", "parquet", "--output", str(tmp_path / "ref.parquet")
    )
    assert code == 0, output
    import datasets

    data = datasets.load_dataset("parquet", data_files=str(tmp_path / "ref.parquet"), split="train")
    assert data.num_rows == 4 and set(data["reward"]) == {1.0}


def test_check_passes_on_calc() -> None:
    code, output = invoke("check", "calc", "--tasks", "train[0:40]")
    assert code == 0, output
    assert "40 tasks" in output


def test_check_lists_failing_tasks_and_exits_nonzero() -> None:
    code, output = invoke(
        "check", "tests.rollout.faulty_envs:EvenTasksUnsolvable", "--env-arg", "num_tasks=6"
    )
    assert code == 1
    assert "3 of 6 tasks fail" in output
    for index in (0, 2, 4):
        assert f"calc-0-0000{index}" in output
    assert "calc-0-00001" not in output.split("tasks fail")[1]

    code, output = invoke("check", "tests.rollout.faulty_envs:AlwaysOne", "--tasks", "0:3")
    assert code == 1 and "noop" in output


def test_resume_after_kill_9(scripted, tmp_path: Path) -> None:
    server = scripted(ScriptConfig(latency_s=0.03))
    out = tmp_path / "killed.jsonl"
    args = [
        "rollout",
        "calc",
        "--model",
        "scripted",
        "--base-url",
        server.base_url,
        "--tasks",
        "train[0:20]",
        "--group-size",
        "3",
        "--concurrency",
        "6",
        "--output",
        str(out),
    ]
    proc = subprocess.Popen(
        [*CLI, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_lines(proc, out, 10)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    before = out.read_bytes().count(b"\n")
    assert before < 60
    with open(out, "ab") as fh:  # as if killed in the middle of a write
        fh.write(b'{"schema_version": 1, "trajectory_id": "torn')
    result = subprocess.run([*CLI, *args, "--resume"], cwd=ROOT, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    records = list(read_records(out))
    pairs = [(r["task_id"], r["sample_index"]) for r in records]
    assert len(pairs) == 60 and len(set(pairs)) == 60
    assert not any(r["masked"] for r in records)

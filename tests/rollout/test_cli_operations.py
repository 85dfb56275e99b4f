"""Operating ``envhub rollout`` and ``envhub export`` as a job: signals, progress in logs,
the up-front model server check, wrong actions, quiet exports (issue 31 papercuts).

Every test runs the real CLI in a subprocess with stdout and stderr piped (as under
Slurm or Kubernetes), against the scripted model server on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envhub.testing import free_port
from envhub.trajectory import read_records
from tests.rollout.helpers import wait_for_lines
from tests.rollout.scripted_server import ScriptConfig

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "envhub.cli"]
PROGRESS_LINE = re.compile(r"^(\d+)/(\d+) episodes, (\d+) masked, ([\d.]+|-) episodes/s$")


def envhub(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def scripted_rollout(base_url: str, out: Path, *extra: str) -> list[str]:
    return [
        "rollout", "calc", "--model", "scripted", "--base-url", base_url,
        "--tasks", "train[0:20]", "--group-size", "3", "--concurrency", "4",
        "--output", str(out), *extra,
    ]  # fmt: skip


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_like_the_time_limit_and_resume_finishes_it(
    scripted, tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    server = scripted(ScriptConfig(latency_s=0.1))
    out = tmp_path / "stopped.jsonl"
    proc = subprocess.Popen(
        [*CLI, *scripted_rollout(server.base_url, out, "--api-key", "sk-secret")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_lines(proc, out, 6)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    printed = stdout + stderr
    assert proc.returncode == code, printed[-3000:]
    raw = out.read_bytes()
    assert raw.endswith(b"\n")  # no torn last line: every line is a whole record
    lines = raw.splitlines()
    assert all(json.loads(line)["task_id"] for line in lines)
    assert 6 <= len(lines) < 60
    summary = json.loads((tmp_path / "stopped.jsonl.summary.json").read_text())
    assert summary["stopped"] == "interrupted" and summary["missing"] == 60 - len(lines)
    assert "rollout summary" in printed and f"{60 - len(lines)} of 60 (interrupted)" in printed
    assert f"interrupted ({signum.name})" in printed and "rerun with --resume" in printed
    assert "sk-secret" not in printed  # the resume command leaves the key out
    rerun = next(line for line in printed.splitlines() if line.startswith("envhub rollout "))
    words = shlex.split(rerun, comments=True)
    assert words[-1] == "--resume" and "--api-key" not in words

    result = envhub(*words[1:])  # the printed command, exactly
    assert result.returncode == 0, result.stderr[-3000:]
    records = list(read_records(out))
    pairs = [(r["task_id"], r["sample_index"]) for r in records]
    assert len(pairs) == 60 and len(set(pairs)) == 60
    assert not any(r["masked"] for r in records)
    assert json.loads((tmp_path / "stopped.jsonl.summary.json").read_text())["missing"] == 0


def test_piped_output_gets_plain_progress_lines_whose_rate_is_the_summarys(
    scripted, tmp_path: Path
) -> None:
    server = scripted(ScriptConfig(latency_s=0.05))
    out = tmp_path / "logged.jsonl"
    result = envhub(*scripted_rollout(server.base_url, out, "--progress-interval", "0.2"))
    assert result.returncode == 0, result.stderr[-3000:]
    progress = [m for m in map(PROGRESS_LINE.match, result.stderr.splitlines()) if m]
    assert len(progress) >= 3, result.stderr[-3000:]  # periodic lines, then the final one
    done = [int(m[1]) for m in progress]
    assert done == sorted(done) and {int(m[2]) for m in progress} == {60}
    final = progress[-1]
    assert (final[1], final[3]) == ("60", "0")
    summary = json.loads((tmp_path / "logged.jsonl.summary.json").read_text())
    table_rate = re.search(r"episodes/s \(this run\)\s*│\s*([\d.]+)", result.stderr)
    assert table_rate is not None
    assert final[4] == table_rate[1] == f"{summary['episodes_per_s']:.1f}"
    assert "━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ " not in result.stderr  # no rich bar


def test_a_model_server_that_does_not_answer_fails_before_the_first_episode(
    tmp_path: Path,
) -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    out = tmp_path / "never.jsonl"
    started = time.monotonic()
    result = envhub("rollout", "calc", "--model", "m", "--base-url", base_url, "--output", str(out))
    assert result.returncode == 2
    assert time.monotonic() - started < 30
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"no model server answers at {base_url}" in errors[0]
    assert "--base-url" in errors[0]
    assert not out.exists()


def test_wrong_actions_include_malformed_calls_recorded_as_tool_errors(tmp_path: Path) -> None:
    out = tmp_path / "wrong.jsonl"
    result = envhub(
        "rollout", "calc", "--policy", "reference", "--wrong-action-p", "0.5",
        "--tasks", "train[0:30]", "--output", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = list(read_records(out))
    errors = [
        m["content"]
        for r in records
        for m in r["messages"]
        if m["role"] == "tool" and m.get("is_error")
    ]
    assert any("not valid JSON" in e for e in errors)
    assert any("unknown tool" in e for e in errors)
    assert any("invalid arguments" in e and "valid string" in e for e in errors)
    assert sum(r["metrics"]["tool_errors"] for r in records) == len(errors)
    assert any(r["stop_reason"] == "final_answer" and r["reward"] == 0 for r in records)


def test_export_prints_no_progress_bars(tmp_path: Path) -> None:
    out = tmp_path / "ref.jsonl"
    result = envhub(
        "rollout", "calc", "--policy", "reference", "--tasks", "train[0:4]", "--output", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for fmt, suffix in (("parquet", "parquet"), ("jsonl", "export.jsonl")):
        result = envhub("export", str(out), "--format", fmt, "-o", str(tmp_path / f"x.{suffix}"))
        assert result.returncode == 0, result.stderr[-3000:]
        printed = result.stdout + result.stderr
        assert printed.strip() == f"4 trajectories -> {tmp_path / f'x.{suffix}'}", printed

"""Resume and failure edge cases of ``envhub rollout`` (issue 12: items 4, 5 and 11).

Each case is a way a run could end with a wrong file or a false success: masked records
counted as done, a final record without its newline, records repeated by a killed resume,
a dead environment server, too many masked episodes, a task slice past the split's end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import envhub.cli.rollout  # noqa: F401 - registers the commands on the app
from envhub.cli._app import app
from envhub.trajectory import read_records
from tests.rollout.scripted_server import ScriptConfig, ThreadedUvicorn

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import envhub.cli.rollout; from envhub.cli import main; main()"]
FAILING = "tests.rollout.faulty_envs:FailingResets"


def invoke(*args: str) -> tuple[int, str]:
    """Exit code and output, with the console's line wrapping undone."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, " ".join(result.output.split())


def pairs_of(path: Path) -> list[tuple[str, int]]:
    return [(r["task_id"], r["sample_index"]) for r in read_records(path)]


def summary_of(path: Path) -> dict[str, Any]:
    return json.loads(Path(f"{path}.summary.json").read_text())


def reference_run(out: Path, *extra: str) -> tuple[int, str]:
    return invoke(
        "rollout", FAILING, "--policy", "reference", "--tasks", "0:8", "--group-size", "2",
        "--concurrency", "4", "--max-env-attempts", "1", "--output", str(out), *extra,
    )  # fmt: skip


def test_an_outage_fails_the_run_and_resume_reruns_its_masked_episodes(tmp_path: Path) -> None:
    out = tmp_path / "outage.jsonl"
    code, output = reference_run(out, "--env-arg", "fail_every=1")  # every reset fails
    assert code == 1, output
    assert "16 of 16 episodes (100%) are masked" in output and "--resume" in output
    assert len(pairs_of(out)) == 16 and all(r["masked"] for r in read_records(out))

    code, output = reference_run(out, "--resume", "--env-arg", "fail_every=2")  # half recover
    assert code == 1, output  # 8 of 16 still masked
    records = list(read_records(out))
    assert sorted(pairs_of(out)) == sorted(set(pairs_of(out))) and len(records) == 16
    by_pair = {(r["task_id"], r["sample_index"]): r for r in records}
    for (task_id, _), record in by_pair.items():  # the latest record of each pair counts
        assert record["masked"] == (int(task_id.rsplit("-", 1)[1]) % 2 == 0)
    assert summary_of(out)["episodes"] == 16 and summary_of(out)["masked"] == 8

    code, output = reference_run(out, "--resume")  # the environment is back
    assert code == 0, output
    records = list(read_records(out))
    assert len(records) == 16 and len(set(pairs_of(out))) == 16
    assert not any(r["masked"] for r in records)
    summary = summary_of(out)
    assert summary["episodes"] == 16 and summary["masked"] == 0
    assert summary["episodes_this_run"] == 8 and summary["mean_reward"] == 1.0


def test_a_final_record_without_its_newline_is_kept_not_lost(tmp_path: Path) -> None:
    out = tmp_path / "no-newline.jsonl"
    code, output = reference_run(out)
    assert code == 0, output
    whole = out.read_bytes()
    out.write_bytes(whole[:-1])  # complete JSON, newline missing
    code, output = reference_run(out, "--resume")
    assert code == 0, output
    assert out.read_bytes() == whole  # terminated, nothing cut, nothing appended
    summary = summary_of(out)
    assert summary["episodes"] == 16 and summary["episodes_this_run"] == 0


def test_records_repeated_by_a_killed_resume_count_once(tmp_path: Path) -> None:
    """A resume killed after re-running a masked episode leaves the masked record and its
    replacement; the latest is the one that counts, and the file is compacted."""
    out = tmp_path / "repeats.jsonl"
    code, output = reference_run(out)
    assert code == 0, output
    lines = out.read_bytes().splitlines(keepends=True)
    mask = {"masked": True, "reward": None, "stop_reason": "env_error",
            "error": {"kind": "sandbox_error", "message": "injected"}}  # fmt: skip
    stale = {**json.loads(lines[0]), **mask}  # before the scored record of its pair
    newer_mask = {**json.loads(lines[1]), **mask}  # after the scored record of its pair
    out.write_bytes(
        json.dumps(stale).encode() + b"\n" + b"".join(lines) + json.dumps(newer_mask).encode()
        + b"\n"
    )  # fmt: skip
    code, output = reference_run(out, "--resume")
    assert code == 0, output
    records = list(read_records(out))
    assert len(records) == 16 and len(set(pairs_of(out))) == 16
    assert not any(r["masked"] for r in records)
    summary = summary_of(out)
    assert summary["episodes"] == 16 and summary["masked"] == 0
    assert summary["episodes_this_run"] == 1  # only the pair whose latest record was masked


def test_masked_fraction_above_the_limit_exits_nonzero(tmp_path: Path) -> None:
    # test split indices 4, 9, ..., 59: fail_every=4 masks tasks 4, 24 and 44, a quarter
    args = ["rollout", FAILING, "--policy", "reference", "--tasks", "0:12", "--env-arg",
            "fail_every=4", "--max-env-attempts", "1"]  # fmt: skip
    code, output = invoke(*args, "--output", str(tmp_path / "a.jsonl"))
    assert code == 1, output
    assert "3 of 12 episodes (25%) are masked, more than the 10% allowed" in output
    assert "sandbox_error: 3" in output
    assert summary_of(tmp_path / "a.jsonl")["masked"] == 3  # the summary is still written
    code, output = invoke(
        *args, "--max-masked-fraction", "0.3", "--output", str(tmp_path / "b.jsonl")
    )
    assert code == 0, output


def test_a_task_slice_past_the_end_of_the_split_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "slice.jsonl"
    code, output = invoke("rollout", "calc", "--policy", "reference", "--tasks", "0:800",
                          "--output", str(out))  # fmt: skip
    assert code == 2, output
    assert "the test split has 600 tasks" in output and "0:600" in output
    assert not out.exists()
    code, output = invoke("rollout", "calc", "--policy", "reference", "--tasks",
                          "train[2390:2500]", "--output", str(out))  # fmt: skip
    assert code == 2 and "the train split has 2400 tasks" in output, output


server_app = pytest.importorskip("envhub.server", reason="the server extra is not installed")


def test_a_dead_environment_server_stops_the_run_and_resume_finishes_it(
    scripted, tmp_path: Path
) -> None:
    model = scripted(ScriptConfig(latency_s=0.05))
    out = tmp_path / "dead.jsonl"
    tasks = 80  # well above the bound on what a guarded run writes (below); resume runs the rest
    env_server = ThreadedUvicorn(server_app.create_app(["calc"]), lifespan="on").start()
    port = env_server.port
    args = [
        "rollout", "calc", "--env-url", env_server.url, "--model", "scripted", "--base-url",
        model.base_url, "--tasks", f"test[0:{tasks}]", "--concurrency", "4", "--max-env-attempts",
        "1", "--output", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen([*CLI, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not out.exists() or out.read_bytes().count(b"\n") < 8:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.02)
        env_server.stop()  # the environment server dies mid-run
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
        env_server.stop()
    message = " ".join(stderr.decode().split())
    assert proc.returncode == 1, message[-3000:]
    assert "in a row were masked" in message and "--resume" in message
    written = pairs_of(out)
    # the breaker stopped dispatching: far from the 80 an unguarded run burns through
    assert len(written) < 8 + 20 + 2 * 4 + 10
    summary = summary_of(out)
    assert summary["stopped"] == "circuit_breaker" and summary["missing"] == tasks - len(written)

    with ThreadedUvicorn(server_app.create_app(["calc"]), port=port, lifespan="on"):
        result = subprocess.run([*CLI, *args, "--resume"], cwd=ROOT, capture_output=True,
                                timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    records = list(read_records(out))
    assert len(records) == tasks and len(set(pairs_of(out))) == tasks
    assert not any(r["masked"] for r in records)
    assert summary_of(out)["missing"] == 0 and summary_of(out)["stopped"] is None

"""A file that holds no trajectories: ``envhub report`` and ``envhub view`` refuse it with
the same message and exit 2; an empty file is refused by the report only (the viewer
follows it: a run that has just started writes one)."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from envhub.cli import app
from envhub.view.index import RunIndex
from tests.view.runs import minimal_record

runner = CliRunner()


def _has(output: str, message: str) -> bool:
    """Whether ``output`` holds ``message``, however the console wrapped it."""
    return "".join(message.split()) in "".join(output.split())


def test_report_and_view_refuse_a_file_without_trajectories_alike(tmp_path: Path) -> None:
    summary = tmp_path / "run.jsonl.summary.json"
    summary.write_text('{\n  "episodes": 3\n}\n')
    cache = ["--cache-dir", str(tmp_path / "cache")]
    out = tmp_path / "report.html"
    message = f"{summary}: no trajectories in 3 lines (line 1: not a JSON record"

    report = runner.invoke(app, ["report", str(summary), "-o", str(out), *cache])
    assert report.exit_code == 2, report.output
    assert _has(report.output, f"error (no_trajectories): {message}")
    assert not out.exists()

    view = runner.invoke(app, ["view", str(summary), "--port", "0", *cache])
    assert view.exit_code == 2, view.output
    assert _has(view.output, f"warning (no_trajectories): {message}")
    assert "(no_runs)" in view.output and "envhub view: http" not in view.output

    empty = tmp_path / "empty.jsonl"
    empty.touch()
    report = runner.invoke(app, ["report", str(empty), "-o", str(out), *cache])
    assert report.exit_code == 2
    assert _has(report.output, f"(no_trajectories): {empty}: no trajectories (an empty file)")
    assert not out.exists()


def test_a_file_with_one_trajectory_among_bad_lines_is_shown(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.write_bytes(b"not json\n" + orjson.dumps(minimal_record(0)) + b"\n")
    index = RunIndex(run, tmp_path / "cache")
    try:
        index.refresh()
        index.require_trajectories(whole_file=True)  # raises nothing
    finally:
        index.close()
    out = tmp_path / "report.html"
    report = runner.invoke(
        app, ["report", str(run), "-o", str(out), "--cache-dir", str(tmp_path / "cache")]
    )
    assert report.exit_code == 0, report.output
    assert out.exists()

"""One bad line never breaks the viewer: a field of the wrong type (dict, list, string,
null, a huge number, 1,000 nested lists), a missing one, or tool-call arguments nested
1,000 deep. ``envhub view`` starts, the runs, run, episodes and every episode page answer
200, and ``envhub report`` completes; a bad line is a problem row naming the field, and
an episode with deeply nested arguments is shown, nested only so deep."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.testing import free_port, serve_in_thread
from envhub.testing.hostile import deeply_nested_json
from envhub.view.app import create_app
from envhub.view.catalog import Catalog
from envhub.view.index import RunIndex
from tests.view.conftest import Runs

runner = CliRunner()

_NESTED = "__nested_1000_deep__"  # replaced by 1,000 nested lists in the written line
_MISSING = object()  # the field is left out

#: every kind of wrong value, by name
WRONG: dict[str, Any] = {
    "dict": {"a": {"b": 1}},
    "list": [1, "x", None],
    "string": "text",
    "nested_text": deeply_nested_json(),
    "null": None,
    "huge_int": 2**64 - 1,  # past sqlite's INTEGER
    "huge_float": 1e308,
    "negative_huge": -1e308,
    "nested": _NESTED,
    "missing": _MISSING,
}

#: every field the index, the pages, the charts, the summary and the report read
FIELDS: list[tuple[str | int, ...]] = [
    ("schema_version",), ("task_id",), ("sample_index",), ("trajectory_id",), ("reward",),
    ("masked",), ("stop_reason",), ("error",), ("served_by",), ("model",), ("env",),
    ("env", "name"), ("env", "version"), ("metrics",), ("metrics", "turns"),
    ("metrics", "tool_calls"), ("metrics", "tool_errors"), ("metrics", "errors_by_kind"),
    ("metrics", "retried_errors"), ("usage",), ("usage", "prompt_tokens"),
    ("usage", "completion_tokens"), ("timings",), ("timings", "llm_s"), ("timings", "env_s"),
    ("timings", "total_s"), ("reward_components",), ("reward_components", "correct"),
    ("turns",), ("turns", 0), ("turns", 0, "policy_version"), ("turns", 0, "latency_s"),
    ("turns", 0, "message_index"), ("turns", 0, "completion_token_ids"),
    ("turns", 0, "completion_logprobs"), ("turns", 0, "prompt_token_ids"),
    ("turns", 0, "prefix_ok"), ("messages",), ("messages", 2), ("messages", 2, "role"),
    ("messages", 2, "content"), ("messages", 2, "tool_calls"),
    ("messages", 2, "tool_calls", 0), ("messages", 2, "tool_calls", 0, "id"),
    ("messages", 2, "tool_calls", 0, "function"),
    ("messages", 2, "tool_calls", 0, "function", "name"),
    ("messages", 2, "tool_calls", 0, "function", "arguments"),
    ("messages", 3, "tool_call_id"), ("messages", 3, "content"), ("messages", 3, "is_error"),
    ("messages", 3, "truncated"),
]  # fmt: skip


def _good(runs: Runs) -> dict[str, Any]:
    """A scored episode of the scripted run: tool calls, a tool error, token ids."""
    for raw in runs.scripted.read_bytes().splitlines():
        record: dict[str, Any] = orjson.loads(raw)
        if not record["masked"] and len(record["messages"]) > 3 and record["turns"]:
            return record
    raise AssertionError("the scripted run has no scored episode with tool calls")


def _with(record: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A copy of ``record`` with the field at ``path`` set to ``value`` (or left out)."""
    copy: dict[str, Any] = orjson.loads(orjson.dumps(record))
    parent: Any = copy
    for key in path[:-1]:
        parent = parent[key]
    if value is _MISSING and isinstance(parent, dict):
        parent.pop(path[-1], None)
    elif value is _MISSING:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return copy


def _line(record: dict[str, Any]) -> bytes:
    """The JSONL line (orjson cannot write 1,000 levels: they are spliced in as text)."""
    nested = b"[" * 1000 + b"]" * 1000
    return orjson.dumps(record).replace(orjson.dumps(_NESTED), nested) + b"\n"


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(_line(r) for r in records))


def _episode_ids(url: str) -> list[int]:
    ids: list[int] = []
    page = 1
    while True:
        reply = httpx.get(f"{url}/api/runs/0/episodes", params={"page": page}, timeout=30)
        assert reply.status_code == 200, reply.text
        ids += [e["id"] for e in reply.json()["episodes"]]
        if page >= reply.json()["pages"]:
            return ids
        page += 1


def _every_page_answers(url: str, run_pages: int = 1) -> str:
    """GET the runs, run, episodes and every episode page (all must be 200); the run
    page's HTML."""
    for path in ["/", "/api/poll", "/api/runs/0/summary"]:
        reply = httpx.get(url + path, timeout=30)
        assert reply.status_code == 200, (path, reply.text[:2000])
    run_page = httpx.get(f"{url}/runs/0", timeout=30)
    assert run_page.status_code == 200, run_page.text[:2000]
    for page in range(1, run_pages + 1):
        reply = httpx.get(f"{url}/runs/0/episodes", params={"page": page}, timeout=30)
        assert reply.status_code == 200, reply.text[:2000]
    for episode_id in _episode_ids(url):
        reply = httpx.get(f"{url}/runs/0/episodes/{episode_id}", timeout=30)
        assert reply.status_code == 200, (episode_id, reply.text[:2000])
        assert "Conversation" in reply.text
    return run_page.text


def _report(run: Path, out: Path) -> str:
    result = runner.invoke(
        app, ["report", str(run), "-o", str(out), "--episodes", "1000",
              "--cache-dir", str(out.parent / "report-cache")],
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    return out.read_text()


ISSUE_CASES = {
    "deeply_nested_arguments": (
        ("messages", 2, "tool_calls", 0, "function", "arguments"),
        deeply_nested_json(),
    ),
    "dict_stop_reason": (("stop_reason",), {"why": "dict"}),
    "no_reward": (("reward",), _MISSING),
    "string_error": (("error",), "a string"),
}


@pytest.mark.parametrize("case", list(ISSUE_CASES))
def test_the_issues_bad_lines_leave_every_page_and_the_report_working(
    runs: Runs, tmp_path: Path, case: str
) -> None:
    path, value = ISSUE_CASES[case]
    good = _good(runs)
    bad = _with(dict(good, task_id="the-bad-one"), path, value)
    run = tmp_path / f"{case}.jsonl"
    _write(run, [good, bad, dict(good, task_id="after-it")])

    catalog = Catalog([run], tmp_path / "cache")
    try:
        with serve_in_thread(create_app(catalog)) as url:
            run_page = _every_page_answers(url)
            episodes = httpx.get(f"{url}/api/runs/0/episodes").json()["episodes"]
            if case == "deeply_nested_arguments":  # a valid episode: shown, cut at a depth
                assert [e["task_id"] for e in episodes] == [good["task_id"], "the-bad-one",
                                                             "after-it"]  # fmt: skip
                html = httpx.get(f"{url}/runs/0/episodes/{episodes[1]['id']}").text
                assert "nested deeper than" in html and "[" * 100 not in html
            else:  # a problem row naming the field; the lines around it are shown
                assert [e["task_id"] for e in episodes] == [good["task_id"], "after-it"]
                problem = re.search(r"<li>line 2 \(byte \d+\): <code>bad_field</code>([^<]*)",
                                    run_page)  # fmt: skip
                assert problem is not None, run_page
                assert path[-1] in problem.group(1)
    finally:
        catalog.close()
    report = _report(run, tmp_path / "report.html")
    assert "after-it" in report


@dataclass(frozen=True)
class FuzzRun:
    path: Path
    lines: int
    good: int  # lines left as they were
    fields: dict[int, tuple[str | int, ...]]  # the field each other line has wrong, by line


@pytest.fixture
def fuzz_run(runs: Runs, tmp_path: Path) -> FuzzRun:
    """Every field with every wrong value, one line each, a good line before each field's
    and after the last."""
    good = _good(runs)
    records = []
    fields = {}
    for field in [*FIELDS, None]:
        records.append(dict(good, task_id=f"good-{len(records)}", sample_index=len(records)))
        for value in WRONG.values() if field else []:
            fuzzed = dict(good, task_id=f"fuzz-{len(records)}", sample_index=len(records))
            records.append(_with(fuzzed, field, value))
            fields[len(records)] = field
    path = tmp_path / "fuzz.jsonl"
    _write(path, records)
    return FuzzRun(path, len(records), len(FIELDS) + 1, fields)


@pytest.fixture
def envhub_view(fuzz_run: FuzzRun, runs: Runs, tmp_path: Path) -> Iterator[str]:
    """``envhub view`` of the fuzz run and the reference run, as a user starts it."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "envhub.cli", "view", str(fuzz_run.path), str(runs.reference),
         "--port", str(port), "--cache-dir", str(tmp_path / "view-cache")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.communicate()[0].decode()
            try:
                if httpx.get(f"{url}/api/poll", timeout=5).json()["runs"][0]["behind"] is False:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "envhub view did not start"
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(30)


def test_every_field_with_every_wrong_type_leaves_the_viewer_and_the_report_working(
    fuzz_run: FuzzRun, envhub_view: str, tmp_path: Path
) -> None:
    state = httpx.get(f"{envhub_view}/api/poll").json()["runs"][0]
    assert state["pending_bytes"] == 0 and state["indexed_bytes"] == fuzz_run.path.stat().st_size
    # each line is an episode or a problem, and every good line beside a bad one is shown
    assert state["episodes"] + state["problems"] == fuzz_run.lines
    shown = httpx.get(f"{envhub_view}/api/runs/0/episodes", params={"task": "good-"}).json()
    assert shown["total"] == fuzz_run.good
    _every_page_answers(envhub_view, run_pages=-(-state["episodes"] // 50))
    for path in ["/compare?a=0&b=1", "/compare/task?a=0&b=1&task_id=fuzz-1"]:
        assert httpx.get(envhub_view + path, timeout=30).status_code == 200, path

    index = RunIndex(fuzz_run.path, tmp_path / "index")  # what the run page lists
    index.refresh()
    problems = index.problems(limit=fuzz_run.lines)
    index.close()
    assert len(problems) > len(FIELDS)  # most wrong values are problem rows
    for problem in problems:  # each names the field it found wrong
        field = ".".join(map(str, fuzz_run.fields[problem.line]))
        if problem.code == "bad_field":
            assert any(p.startswith(field) for p in problem.message.split("; ")), problem
        else:
            assert problem.code == {"schema_version": "unknown_schema_version",
                                    "task_id": "not_a_trajectory"}[field], problem  # fmt: skip

    report = _report(fuzz_run.path, tmp_path / "fuzz-report.html")
    assert report.count('<section class="episode"') == state["episodes"]

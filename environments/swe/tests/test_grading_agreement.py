"""envhub's verdict against SWE-bench's own grader, on logs of real pytest runs.

A small repository (``calc``) and a test patch whose tests hold the cases that trip
graders up: parametrised ids with spaces and `` - ``, a long id, tests skipped by the
code under test (one FAIL_TO_PASS, one PASS_TO_PASS), a test that prints result-like
lines into its captured output, xfail/xpass, and a module that fails to collect. Each
patch state (gold, no-op, partial, skipped, broken) runs through envhub's test runner
in a local sandbox; the function the environment grades SWE-bench records with
(``Instance.grade``) must give the verdict ``swebench.harness.grading`` gives on the
same log, written as its harness writes it. FAIL_TO_PASS/PASS_TO_PASS are made the way
SWE-bench makes them (its parser on the no-op and gold logs), once with the parser
that made them and once, SWE-bench Verified-style, graded by ``parse_log_pytest_v2``
whose full ids only prefix-match the lists' ids cut at the first space.

envhub's own generated tasks are checked too: lists made by envhub's reading of the
gold and no-op logs grade gold FULL and every other state as expected.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import swebench.harness.constants as swebench_constants
import swebench.types as swebench_types
from envhub_swe.catalog import Layout
from envhub_swe.instances import Instance, resolve_instance, to_task
from envhub_swe.testrun import TestRun, apply_patch, checkout, run_tests
from swebench.harness import grading as official
from swebench.harness.log_parsers import PARSER_REGISTRY

import envhub
from envhub.rewards.swe import PASSING, Resolution, grade_log, passed_tests, read_statuses
from envhub.sandboxes import SandboxSpec, open_sandbox
from envhub.sandboxes import shared_pools as pools
from envhub.testing import call_tool

BUGGY = '''\
"""A calculator: the repository of the grading agreement tests."""

LEGACY = False  # a legacy build skips the tests of the modern API


def evaluate(expr):
    left, op, right = expr.split()
    a, b = int(left), int(right)
    if op == "+":
        return a + b
    if op == "-":
        return a + b
    raise ValueError(f"unknown operator {op!r}")


def describe(n):
    return "positive" if n >= 0 else "negative"
'''
FIX_EVALUATE = ("        return a + b\n    raise", "        return a - b\n    raise")
FIX_DESCRIBE = (
    'return "positive" if n >= 0 else "negative"',
    'return "zero" if n == 0 else "positive" if n > 0 else "negative"',
)
EXTRA = "def double(n):\n    return 2 * n\n"

TESTS = """\
import pytest

import calc


@pytest.mark.parametrize(
    "expr, expected", [("1 + 1", 2), ("3 - 1", 2), ("10 - 4", 6), ("2 + 40", 42)]
)
def test_evaluate(expr, expected):
    assert calc.evaluate(expr) == expected


@pytest.mark.parametrize(
    "label", ["x"], ids=["a long label - with dashes, spaces and (parens) " * 3]
)
def test_long_label(label):
    assert calc.evaluate("7 - 2") == 5, label


def test_modern_api():
    if calc.LEGACY:
        pytest.skip("legacy build")
    assert calc.evaluate("2 + 2") == 4


@pytest.mark.skip(reason="always - skipped")
def test_never():
    pass


def test_prints_result_lines():
    print("PASSED tests/test_calc.py::test_zero")
    print("SKIPPED tests/test_calc.py::test_modern_api")
    print("FAILED tests/test_calc.py::test_never - printed, not a result")
    assert calc.evaluate("1 + 2") == 3


@pytest.mark.xfail(raises=ValueError, strict=True)
def test_multiply():
    calc.evaluate("2 * 3")


@pytest.mark.xfail(reason="zero - a known bug")
def test_zero_known_bug():
    assert calc.describe(0) == "zero"
"""
#: what the test patch adds to tests/test_calc.py (a new FAIL_TO_PASS test)
TEST_ZERO = """

def test_zero():
    if calc.LEGACY:
        pytest.skip("legacy build")
    assert calc.describe(0) == "zero"
"""
#: the new module the test patch adds
TESTS_EXTRA = "from calc.extra import double\n\n\ndef test_double():\n    assert double(2) == 4\n"


def _fixed(*fixes: tuple[str, str]) -> str:
    source = BUGGY
    for old, new in fixes:
        assert source.count(old) == 1
        source = source.replace(old, new)
    return source


#: patch state -> the package's files
STATES: dict[str, dict[str, str]] = {
    "noop": {},
    "gold": {"calc/__init__.py": _fixed(FIX_EVALUATE, FIX_DESCRIBE)},
    "partial": {"calc/__init__.py": _fixed(FIX_EVALUATE)},
    "skipped": {
        "calc/__init__.py": _fixed(FIX_EVALUATE, FIX_DESCRIBE, ("LEGACY = False", "LEGACY = True"))
    },
    "broken": {
        "calc/__init__.py": _fixed(FIX_EVALUATE, FIX_DESCRIBE),
        "calc/extra.py": "def double(n):\n    return 2 *\n",  # tests/test_extra.py cannot collect
    },
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
         *args], cwd=repo, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def _write(repo: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The repository (one commit, the buggy code), the test patch, each state's diff,
    and the layout that runs its tests with this interpreter."""
    repo = tmp_path_factory.mktemp("calc-repo")
    _write(repo, {
        "pyproject.toml": "[tool.pytest.ini_options]\n",
        "calc/__init__.py": BUGGY,
        "calc/extra.py": EXTRA,
        "tests/test_calc.py": TESTS,
    })  # fmt: skip
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    _write(repo, {"tests/test_calc.py": TESTS + TEST_ZERO, "tests/test_extra.py": TESTS_EXTRA})
    _git(repo, "add", "-A")
    test_patch = _git(repo, "diff", "--cached")
    _git(repo, "reset", "-q", "--hard")
    diffs = {}
    for state, changes in STATES.items():
        for path, text in changes.items():
            (repo / path).write_text(text)
        diffs[state] = _git(repo, "diff")
        _git(repo, "checkout", "-q", "--", ".")
    yield {
        "repo": repo,
        "base": base,
        "test_patch": test_patch,
        "diffs": diffs,
        "layout": Layout(repo_dir=str(repo), venv=sys.prefix),
    }
    pools.shutdown("swe")


def _record(project: dict[str, Any], f2p: list[str], p2p: list[str], **extra: Any) -> dict:
    return {
        "instance_id": "example__calc-1",
        "repo": "example/calc",
        "version": "1.0",
        "base_commit": project["base"],
        "patch": project["diffs"]["gold"],
        "test_patch": project["test_patch"],
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "problem_statement": "evaluate('3 - 1') is 4; describe(0) says positive",
        **extra,
    }


def _instance(project: dict[str, Any], record: dict) -> Instance:
    return resolve_instance(to_task(record), image_template=None, layout=project["layout"])


@pytest.fixture(scope="module")
def runs(project: dict[str, Any]) -> dict[str, TestRun]:
    """Each state's run of envhub's test command in a fresh local sandbox, as grading
    runs it: the test patch, the state's source, the files the test patch touches."""
    inst = _instance(project, _record(project, [], []))
    assert inst.repo.tests == ["tests/test_calc.py", "tests/test_extra.py"]

    async def run(state: str) -> TestRun:
        spec = SandboxSpec(image="python", env=inst.layout.env(inst.repo, "."), pids=512)
        async with open_sandbox(spec, "local") as sb:
            await checkout(sb, inst.layout)
            assert await apply_patch(sb, project["test_patch"])
            for path, text in STATES[state].items():
                await sb.write_file(path, text.encode())
            return await run_tests(sb, inst.repo, inst.layout, timeout=120)

    return {state: asyncio.run(run(state)) for state in STATES}


def _harness_file(tmp_path: Path, run: TestRun) -> Path:
    """``test_output.txt`` as SWE-bench's harness writes it for this run."""
    c = swebench_constants
    path = tmp_path / "test_output.txt"
    path.write_text(
        f"+ : '{c.START_TEST_OUTPUT}'\n{run.log}\n+ : '{c.END_TEST_OUTPUT}'\n"
        f"{c.TEST_EXIT_CODE}: {run.exit_code}\n"
    )
    return path


def _official(tmp_path: Path, run: TestRun, record: dict, parser: str) -> dict[str, Any]:
    """SWE-bench's report on the run: resolution and the failing tests."""
    spec = swebench_types.TestSpec(
        instance_id=record["instance_id"], image="", eval_script_list=[], repo=record["repo"],
        version=record["version"], FAIL_TO_PASS=record["FAIL_TO_PASS"],
        PASS_TO_PASS=record["PASS_TO_PASS"], log_parser=parser, eval_type="pass_and_fail",
    )  # fmt: skip
    prediction = {"instance_id": spec.instance_id, "model_patch": "-", "model_name_or_path": "t"}
    path = _harness_file(tmp_path, run)
    report = official.get_eval_report(spec, prediction, str(path), include_tests_status=True)
    report = report[spec.instance_id]
    if not report["patch_successfully_applied"]:
        return {"resolution": "RESOLVED_NO", "resolved": False}
    tests = report["tests_status"]
    return {
        "resolution": official.get_resolution_status(tests),
        "resolved": report["resolved"],
        "failed_f2p": tests[swebench_constants.FAIL_TO_PASS]["failure"],
        "failed_p2p": tests[swebench_constants.PASS_TO_PASS]["failure"],
    }


def _swebench_lists(runs: dict[str, TestRun], parser: str) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS/PASS_TO_PASS as SWE-bench derives them: its parser on the log
    before (no-op) and after (gold) the fix."""
    parse = PARSER_REGISTRY[parser]
    before, after = parse(runs["noop"].log, None), parse(runs["gold"].log, None)
    passing_after = [t for t in after if official.test_passed(t, after)]
    f2p = sorted(t for t in passing_after if not official.test_passed(t, before))
    p2p = sorted(t for t in passing_after if official.test_passed(t, before))
    return f2p, p2p


EXPECTED = {  # SWE-bench's verdicts (both parsers), so the cases are the intended ones
    "noop": "RESOLVED_NO",
    "gold": "RESOLVED_FULL",
    "partial": "RESOLVED_PARTIAL",
    # test_zero is skipped but printed "PASSED", test_modern_api skipped and printed
    # "SKIPPED" (a skipped P2P test is maintained): SWE-bench resolves it
    "skipped": "RESOLVED_FULL",
    "broken": "RESOLVED_NO",
}


@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize(
    ("lists_from", "graded_by"),
    [("parse_log_pytest", None), ("parse_log_pytest", "parse_log_pytest_v2")],
    ids=["pytest", "verified-truncated-ids"],
)
def test_swebench_records_get_swebench_verdict(
    project: dict[str, Any],
    runs: dict[str, TestRun],
    tmp_path: Path,
    state: str,
    lists_from: str,
    graded_by: str | None,
) -> None:
    f2p, p2p = _swebench_lists(runs, lists_from)
    extra = {"log_parser": graded_by} if graded_by else {}
    record = _record(project, f2p, p2p, **extra)
    inst = _instance(project, record)
    assert inst.log_parser == (graded_by or "parse_log_pytest")
    theirs = _official(tmp_path, runs[state], record, inst.log_parser)
    ours = inst.grade(runs[state])
    assert f"RESOLVED_{ours.resolution.value}" == theirs["resolution"]
    assert ours.resolved == theirs["resolved"]
    if "failed_f2p" in theirs:
        assert list(ours.failed_f2p) == theirs["failed_f2p"]
        assert list(ours.failed_p2p) == theirs["failed_p2p"]
    assert theirs["resolution"] == EXPECTED[state]


def test_the_cases_are_in_the_lists(runs: dict[str, TestRun]) -> None:
    """The lists hold the tricky ids as SWE-bench's parser cut them."""
    f2p, p2p = _swebench_lists(runs, "parse_log_pytest")
    assert "tests/test_calc.py::test_evaluate[3" in f2p  # "3 - 1-2", cut at the space
    assert "tests/test_calc.py::test_long_label[a" in f2p
    assert "tests/test_calc.py::test_zero" in f2p
    assert "tests/test_calc.py::test_modern_api" in p2p
    assert "tests/test_calc.py::test_multiply" in p2p  # XFAIL passes
    assert "tests/test_extra.py::test_double" in p2p
    assert runs["broken"].exit_code == 2  # interrupted by the collection error


def test_swebench_record_episode_grades_like_swebench(
    project: dict[str, Any], runs: dict[str, TestRun], tmp_path: Path
) -> None:
    """Through a whole episode (``swebench=`` option, local sandbox): the reward is the
    official verdict on the state the agent leaves."""
    f2p, p2p = _swebench_lists(runs, "parse_log_pytest")
    record = _record(project, f2p, p2p)
    data = tmp_path / "instances.jsonl"
    data.write_text(json.dumps(record) + "\n")
    env = envhub.make(
        "swe",
        sandbox="local",
        swebench=str(data),
        repo_dir=str(project["repo"]),
        venv=sys.prefix,
        pool_size=0,
    )

    async def episode(state: str) -> Any:
        session = await env.open(record["instance_id"])
        diff = project["diffs"][state]
        command = f"printf '%s' {shlex.quote(diff)} | git apply -"
        out = await call_tool(session, "bash", command=command)
        assert "<returncode>0</returncode>" in out.observations[0].content
        await call_tool(session, "submit")
        return await session.close()

    for state in ("gold", "partial", "skipped"):
        result = asyncio.run(episode(state))
        theirs = _official(tmp_path, runs[state], record, "parse_log_pytest")
        assert f"RESOLVED_{result.info['resolution']}" == theirs["resolution"], state
        assert result.reward == (1.0 if theirs["resolved"] else 0.0)


def test_generated_tasks_grade_with_the_reading_that_made_them(
    runs: dict[str, TestRun],
) -> None:
    """envhub's semantics: exact node ids from the -rA summary, printed lines ignored,
    skips fail; the lists generation makes from the gold and no-op logs grade the gold
    state FULL and the others as a reader of the tests would expect."""
    passing = passed_tests(runs["gold"].log)
    statuses = read_statuses(runs["noop"].log, passing)
    f2p = [t for t in passing if statuses.get(t) not in PASSING]
    p2p = [t for t in passing if statuses.get(t) in PASSING]
    assert "tests/test_calc.py::test_evaluate[3 - 1-2]" in f2p
    assert "tests/test_calc.py::test_evaluate[1 + 1-2]" in p2p
    long_id = "tests/test_calc.py::test_long_label[" + "a long label - with dashes, spaces"
    assert any(t.startswith(long_id) for t in f2p)
    assert "tests/test_calc.py::test_multiply" in p2p  # XFAIL passes
    assert "tests/test_calc.py::test_zero_known_bug" not in passing  # XPASS in gold
    expected = {
        "gold": Resolution.FULL,
        "noop": Resolution.NO,
        "partial": Resolution.PARTIAL,
        "skipped": Resolution.NO,  # test_zero and test_modern_api skipped: not passed
        "broken": Resolution.NO,
    }
    for state, resolution in expected.items():
        assert grade_log(runs[state].log, f2p, p2p).resolution is resolution, state

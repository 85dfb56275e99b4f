"""Grading SWE tasks from a pytest log: two semantics, chosen by where a task comes from.

**envhub's own generated tasks** (:func:`passed_tests`, :func:`read_statuses`,
:func:`grade_log`), used by task generation and by grading alike, standard library only:

- the log is a pytest ``-rA`` run; only its short test summary (after the last
  ``short test summary info`` header, up to the closing ``=== ... ===`` line) is read, so
  output that tests print (captured in the PASSES/FAILURES sections) cannot pose as a
  result, and a log cut off before the summary has no results at all;
- test ids are pytest node ids exactly as pytest prints them, spaces, `` - `` and
  brackets included: a summary line ``WORD <id>`` or ``WORD <id> - <message>`` is the
  result of the longest known id it starts with; later lines win (a test that passed
  and then errored in teardown is an ERROR);
- PASSED and XFAIL pass (SWE-bench's convention); FAILED, ERROR, XPASS, skipped
  (``-rA`` names no id for a skip) and missing tests fail, in FAIL_TO_PASS and
  PASS_TO_PASS alike; generation's baseline is the tests that pass;
- f2p = passed F2P / |F2P|, p2p = passed P2P / |P2P|, an empty list counts as 1;
  FULL iff both are 1, PARTIAL iff 0 < f2p < 1 and p2p = 1, otherwise NO.

These are not SWE-bench's semantics. SWE-bench's pytest parser splits each line on
whitespace (an id with a space becomes its first word), reads result-like lines
anywhere in the log (captured output included), counts a PASS_TO_PASS test its log
shows as SKIPPED as maintained, and prefix-matches ids truncated mid-parameter.

**SWE-bench-format instances** (:func:`grade_swebench`): the verdict of the ``swebench``
package itself, its log parser and grading functions called on the log framed as its
harness writes it, not a re-implementation. ``swebench`` is an extra
(``pip install 'envhub-rl-swe[swebench]'``), imported on first use.
"""

from __future__ import annotations

import locale
import re
import tempfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import cast

from envhub.errors import InvalidRequest

__all__ = [
    "PASSING",
    "SWEBENCH_INSTALL_HINT",
    "Grade",
    "Resolution",
    "TestStatus",
    "grade",
    "grade_log",
    "grade_swebench",
    "passed_tests",
    "read_statuses",
    "summary_lines",
    "swebench_eval_type",
    "swebench_log_parser",
]


class TestStatus(str, Enum):
    __test__ = False  # not a pytest test class

    PASSED = "PASSED"
    FAILED = "FAILED"
    ERROR = "ERROR"
    SKIPPED = "SKIPPED"
    XFAIL = "XFAIL"
    XPASS = "XPASS"


#: statuses that count as a pass when grading (SWE-bench's convention)
PASSING = frozenset({TestStatus.PASSED, TestStatus.XFAIL})

_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (.+)$")
_SUMMARY = re.compile(r"^=+ short test summary info =+$")


def summary_lines(log: str) -> list[tuple[TestStatus, str]]:
    """``(status, rest of the line)`` for each result line of the log's short summary."""
    lines = log.splitlines()
    for start in range(len(lines) - 1, -1, -1):
        if _SUMMARY.match(lines[start]):
            break
    else:
        return []
    out: list[tuple[TestStatus, str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("="):  # "==== 1 failed, 2 passed in 0.1s ====": the end
            break
        if m := _LINE.match(line):
            out.append((TestStatus(m.group(1)), m.group(2)))
    return out


def _known_id(rest: str, known: Collection[str]) -> str | None:
    """The longest of ``known`` that ``rest`` is, or that ``rest`` starts with followed by
    pytest's `` - <message>`` (ids may contain `` - `` themselves)."""
    if rest in known:
        return rest
    found = None
    cut = rest.find(" - ")
    while cut != -1:
        if rest[:cut] in known:
            found = rest[:cut]
        cut = rest.find(" - ", cut + 1)
    return found


def read_statuses(log: str, tests: Iterable[str]) -> dict[str, TestStatus]:
    """Status of each of ``tests`` (exact node ids) that the log's summary reports."""
    known = set(tests)
    statuses: dict[str, TestStatus] = {}
    for status, rest in summary_lines(log):
        if (node := _known_id(rest, known)) is not None:
            statuses[node] = status
    return statuses


def _id_candidates(rest: str) -> list[str]:
    """The node ids an XFAIL line's remainder (``<id>`` or ``<id> - <reason>``) can start
    with: a cut at a `` - `` or the whole, ending in ``]`` if it has parameters, else
    without spaces."""
    cuts = [m.start() for m in re.finditer(" - ", rest)] + [len(rest)]
    heads = (rest[:cut] for cut in cuts)
    return [h for h in heads if (h.endswith("]") if "[" in h else " " not in h)]


def passed_tests(log: str) -> list[str]:
    """The node ids whose final status in the log passes, sorted (a task's baseline).

    A PASSED line is an id exactly; an XFAIL line may carry a reason, so its id is the
    longest candidate (:func:`_id_candidates`), as :func:`read_statuses` reads it later.
    """
    candidates: list[str] = []
    for status, rest in summary_lines(log):
        if status is TestStatus.PASSED:
            candidates.append(rest)
        elif status is TestStatus.XFAIL:
            candidates += _id_candidates(rest)
    final = read_statuses(log, candidates)
    return sorted(t for t, s in final.items() if s in PASSING)


class Resolution(str, Enum):
    FULL = "FULL"
    PARTIAL = "PARTIAL"
    NO = "NO"


@dataclass(frozen=True)
class Grade:
    """The outcome of one evaluation; ``resolved`` is SWE-bench's metric."""

    f2p: float
    p2p: float
    resolution: Resolution
    failed_f2p: tuple[str, ...]
    failed_p2p: tuple[str, ...]

    @property
    def resolved(self) -> bool:
        return self.resolution is Resolution.FULL


def _resolution(f2p: float, p2p: float) -> Resolution:
    if f2p == 1.0 and p2p == 1.0:
        return Resolution.FULL
    if 0.0 < f2p < 1.0 and p2p == 1.0:
        return Resolution.PARTIAL
    return Resolution.NO


def _fraction(tests: list[str], statuses: Mapping[str, TestStatus]) -> tuple[float, list[str]]:
    failed = [t for t in tests if statuses.get(t) not in PASSING]
    if not tests:
        return 1.0, failed
    return (len(tests) - len(failed)) / len(tests), failed


def grade(
    statuses: Mapping[str, TestStatus],
    fail_to_pass: Iterable[str],
    pass_to_pass: Iterable[str],
) -> Grade:
    """Grade test statuses against a task's FAIL_TO_PASS and PASS_TO_PASS lists."""
    f2p, failed_f2p = _fraction(list(fail_to_pass), statuses)
    p2p, failed_p2p = _fraction(list(pass_to_pass), statuses)
    return Grade(f2p, p2p, _resolution(f2p, p2p), tuple(failed_f2p), tuple(failed_p2p))


def grade_log(log: str, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]) -> Grade:
    """Grade a pytest ``-rA`` log with envhub's semantics (envhub's generated tasks)."""
    return grade(read_statuses(log, [*fail_to_pass, *pass_to_pass]), fail_to_pass, pass_to_pass)


# -- SWE-bench-format instances: the swebench package's own verdict ----------------------

SWEBENCH_INSTALL_HINT = "pip install 'envhub-rl-swe[swebench]'"


def _swebench_grading() -> ModuleType:
    try:
        from swebench.harness import grading
    except ImportError as exc:
        raise InvalidRequest(
            f"grading SWE-bench instances needs the swebench package ({exc}): "
            f"{SWEBENCH_INSTALL_HINT}"
        ) from exc
    return cast(ModuleType, grading)  # swebench is not type-checked (follow_imports=skip)


def swebench_log_parser(repo: str, declared: str | None = None) -> str:
    """The name of SWE-bench's log parser for an instance: the record's own ``log_parser``
    (SWE-bench 5 datasets), else the one SWE-bench assigns to ``repo``, else
    ``parse_log_pytest``. envhub runs an instance's tests with pytest, so a parser of
    another runner's log (django's, sympy's) is refused rather than fed a pytest log."""
    _swebench_grading()
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.log_parsers import python as py

    if declared:
        if declared not in PARSER_REGISTRY:
            raise InvalidRequest(f"unknown SWE-bench log_parser {declared!r}")
        name = declared
    else:
        parser = py.MAP_REPO_TO_PARSER_PY.get(repo, py.parse_log_pytest)
        name = next(n for n, f in PARSER_REGISTRY.items() if f is parser)
    pytest_parsers = {
        py.parse_log_pytest,
        py.parse_log_pytest_options,
        py.parse_log_pytest_v2,
        py.parse_log_matplotlib,
        py.parse_log_seaborn,
    }
    if PARSER_REGISTRY[name] not in pytest_parsers:
        raise InvalidRequest(
            f"{repo or 'this instance'} is graded by SWE-bench's {name}, which reads another "
            "test runner's log; envhub runs SWE-bench instances with pytest"
        )
    return name


def swebench_eval_type(declared: str | None = None) -> str:
    """The record's ``eval_type`` (SWE-bench 5 datasets), else ``pass_and_fail``."""
    _swebench_grading()
    from swebench.harness.constants import EvalType

    try:
        return str(EvalType(declared or EvalType.PASS_AND_FAIL.value).value)
    except ValueError:
        raise InvalidRequest(f"unknown SWE-bench eval_type {declared!r}") from None


def _harness_log(log: str, exit_code: int | None) -> str:
    """The test log as SWE-bench's harness records it (``test_output.txt`` of an eval
    script run under ``set -x``): the output between its markers, then the test
    command's exit status, which its grader checks against the parsed results."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE

    text = f"+ : '{START_TEST_OUTPUT}'\n{log}\n+ : '{END_TEST_OUTPUT}'\n"
    if exit_code is not None:
        text += f"{TEST_EXIT_CODE}: {exit_code}\n"
    return text


def grade_swebench(
    log: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    *,
    exit_code: int | None,
    timed_out: bool = False,
    log_parser: str = "parse_log_pytest",
    eval_type: str = "pass_and_fail",
) -> Grade:
    """SWE-bench's verdict on a test log: ``swebench.harness.grading.get_logs_eval`` on
    the log as its harness frames it, then ``get_eval_tests_report``,
    ``compute_fail_to_pass``/``compute_pass_to_pass`` and ``get_resolution_status``.

    A run that timed out is not resolved (SWE-bench's harness reports it as an error);
    a log its grader rejects (no results, or an exit status that contradicts them)
    fails every test.
    """
    grading = _swebench_grading()
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, EvalType, ResolvedStatus
    from swebench.types import TestSpec

    f2p_ids, p2p_ids = list(fail_to_pass), list(pass_to_pass)
    rejected = Grade(0.0, 0.0, Resolution.NO, tuple(f2p_ids), tuple(p2p_ids))
    if timed_out:
        return rejected
    spec = TestSpec(
        instance_id="envhub",
        image="",
        eval_script_list=[],
        repo="",
        version="",
        FAIL_TO_PASS=f2p_ids,
        PASS_TO_PASS=p2p_ids,
        log_parser=log_parser,
        eval_type=eval_type,
    )
    with tempfile.TemporaryDirectory(prefix="envhub-swebench-") as tmp:
        path = Path(tmp) / "test_output.txt"
        # the grader opens the file with the locale's encoding
        path.write_text(
            _harness_log(log, exit_code),
            encoding=locale.getpreferredencoding(False),
            errors="replace",
        )
        status_map, found = grading.get_logs_eval(spec, str(path))
    if not found:
        return rejected
    report = grading.get_eval_tests_report(
        status_map,
        {FAIL_TO_PASS: f2p_ids, PASS_TO_PASS: p2p_ids},
        eval_type=EvalType(eval_type),
    )
    resolution = {
        ResolvedStatus.FULL.value: Resolution.FULL,
        ResolvedStatus.PARTIAL.value: Resolution.PARTIAL,
        ResolvedStatus.NO.value: Resolution.NO,
    }[grading.get_resolution_status(report)]
    return Grade(
        f2p=float(grading.compute_fail_to_pass(report)),
        p2p=float(grading.compute_pass_to_pass(report)),
        resolution=resolution,
        failed_f2p=tuple(report[FAIL_TO_PASS]["failure"]),
        failed_p2p=tuple(report[PASS_TO_PASS]["failure"]),
    )

"""envhub's grading of its generated tasks (exact node ids from the ``-rA`` summary) and
the SWE-bench path's use of the ``swebench`` package (agreement on real runs:
test_grading_agreement.py)."""

from __future__ import annotations

import sys

import pytest

from envhub.errors import InvalidRequest
from envhub.rewards.swe import (
    SWEBENCH_INSTALL_HINT,
    Resolution,
    TestStatus,
    grade,
    grade_log,
    grade_swebench,
    passed_tests,
    read_statuses,
    summary_lines,
    swebench_eval_type,
    swebench_log_parser,
)

A = "tests/test_a.py"
LOG = f"""\
============================= test session starts ==============================
tests/test_a.py ..F.sx                                                   [100%]
=================================== FAILURES ===================================
___________________________________ test_c ____________________________________
E   assert 1 == 2
----------------------------- Captured stdout call -----------------------------
PASSED {A}::test_c
==================================== PASSES ====================================
PASSED {A}::test_skipped
=========================== short test summary info ============================
PASSED {A}::test_a
PASSED {A}::test_b[x - y]
PASSED {A}::test_h[x] - [y]
PASSED {A}::test_t
SKIPPED [1] {A}:20: no reason
XFAIL {A}::test_e - known - bug
XPASS {A}::test_g - xp
ERROR {A}::test_f[a]b] - fixture 'x' not found
ERROR {A}::test_t - RuntimeError: teardown - failed
FAILED {A}::test_c - assert 1 == 2
FAILED {A}::test_i[p - q] - assert 'p - q' == 'r'
==================== 2 failed, 4 passed, 1 skipped in 0.1s =====================
PASSED {A}::test_after_the_end
"""
IDS = [
    f"{A}::{name}"
    for name in ("test_a", "test_b[x - y]", "test_h[x] - [y]", "test_t", "test_e", "test_g",
                 "test_f[a]b]", "test_c", "test_i[p - q]", "test_skipped", "test_after_the_end")
]  # fmt: skip


def test_statuses_come_from_the_summary_with_exact_ids() -> None:
    assert read_statuses(LOG, IDS) == {
        f"{A}::test_a": TestStatus.PASSED,
        f"{A}::test_b[x - y]": TestStatus.PASSED,
        f"{A}::test_h[x] - [y]": TestStatus.PASSED,  # " - " after a bracket: still the id
        f"{A}::test_t": TestStatus.ERROR,  # passed, then errored in teardown: later wins
        f"{A}::test_e": TestStatus.XFAIL,
        f"{A}::test_g": TestStatus.XPASS,
        f"{A}::test_f[a]b]": TestStatus.ERROR,
        f"{A}::test_c": TestStatus.FAILED,  # "PASSED" in its captured output is not read
        f"{A}::test_i[p - q]": TestStatus.FAILED,
    }  # test_skipped (printed PASSED) and lines after the closing line: no result


def test_an_id_that_is_a_prefix_of_another_is_matched_exactly() -> None:
    log = "=== short test summary info ===\nFAILED t.py::t[a] - b] - assert 0\nPASSED t.py::t[a]\n"
    assert read_statuses(log, ["t.py::t[a]", "t.py::t[a] - b]"]) == {
        "t.py::t[a] - b]": TestStatus.FAILED,
        "t.py::t[a]": TestStatus.PASSED,
    }


def test_a_log_without_a_summary_has_no_results() -> None:
    """A run killed before the summary: printed lines do not count."""
    cut = LOG.split("=== short test summary info")[0]
    assert summary_lines(cut) == [] and read_statuses(cut, IDS) == {}
    assert passed_tests(cut) == [] and passed_tests("") == []


def test_baseline_is_what_passed() -> None:
    assert passed_tests(LOG) == sorted(
        f"{A}::{n}" for n in ("test_a", "test_b[x - y]", "test_h[x] - [y]", "test_e")
    )  # test_t errored in teardown; test_e is an XFAIL with a reason
    xfails = (
        "=== short test summary info ===\n"
        "XFAIL t.py::u[a - b] - why - because\n"
        "XFAIL t.py::v[c] - d]\n"
        "XFAIL t.py::w\n"
    )
    assert passed_tests(xfails) == ["t.py::u[a - b]", "t.py::v[c] - d]", "t.py::w"]


def test_grade_full_partial_no() -> None:
    statuses = read_statuses(LOG, IDS)
    a, b, c, e = (f"{A}::{n}" for n in ("test_a", "test_b[x - y]", "test_c", "test_e"))
    full = grade(statuses, [a, e], [b])  # XFAIL counts as a pass
    assert full.resolution is Resolution.FULL and full.resolved and (full.f2p, full.p2p) == (1, 1)
    partial = grade(statuses, [a, c], [b])
    assert partial.resolution is Resolution.PARTIAL and partial.f2p == 0.5
    assert partial.failed_f2p == (c,)
    broken = grade(statuses, [a], [b, c])
    assert broken.resolution is Resolution.NO and broken.p2p == 0.5
    missing = grade(statuses, [f"{A}::nowhere"], [])
    assert missing.resolution is Resolution.NO and missing.f2p == 0.0
    assert grade({}, [], []).resolution is Resolution.FULL  # empty lists count as 1
    skipped = grade_log(LOG, [a], [f"{A}::test_skipped"])  # a skip fails, even in P2P
    assert skipped.resolution is Resolution.NO and skipped.failed_p2p == (f"{A}::test_skipped",)
    assert grade_log(LOG, [f"{A}::test_i[p - q]"], [b]).failed_f2p == (f"{A}::test_i[p - q]",)


def test_swebench_grading_is_swebench_s() -> None:
    """The same log graded by SWE-bench: ids cut at the first space, captured output
    read, a SKIPPED P2P test maintained."""
    log = LOG.replace("SKIPPED [1]", f"SKIPPED {A}::test_p2p_skipped\nSKIPPED [1]")
    p2p = [f"{A}::test_a", f"{A}::test_p2p_skipped", f"{A}::test_b[x"]
    result = grade_swebench(log, [f"{A}::test_skipped"], p2p, exit_code=1)
    assert result.resolution is Resolution.FULL and (result.f2p, result.p2p) == (1.0, 1.0)
    assert grade_log(log, [f"{A}::test_skipped"], p2p).resolution is Resolution.NO
    skipped_f2p = grade_swebench(log, [f"{A}::test_p2p_skipped"], [], exit_code=1)
    assert skipped_f2p.resolution is Resolution.NO  # a skipped F2P test is not resolved
    # a run that timed out, or whose exit status contradicts its results, is not resolved
    timed_out = grade_swebench(log, [f"{A}::test_a"], [], exit_code=None, timed_out=True)
    assert timed_out.resolution is Resolution.NO and timed_out.failed_f2p == (f"{A}::test_a",)
    only_passes = "=== short test summary info ===\nPASSED t.py::t\n"
    assert grade_swebench(only_passes, ["t.py::t"], [], exit_code=0).resolved
    assert not grade_swebench(only_passes, ["t.py::t"], [], exit_code=1).resolved


def test_swebench_parser_and_eval_type_choice() -> None:
    assert swebench_log_parser("example/calc") == "parse_log_pytest"
    assert swebench_log_parser("astropy/astropy") in ("parse_log_astropy", "parse_log_pytest_v2")
    assert swebench_log_parser("psf/requests", "parse_log_pytest_v2") == "parse_log_pytest_v2"
    for repo, declared in (("django/django", None), ("sympy/sympy", None), ("x/y", "nope")):
        with pytest.raises(InvalidRequest):
            swebench_log_parser(repo, declared)
    assert swebench_eval_type(None) == "pass_and_fail"
    assert swebench_eval_type("fail_only") == "fail_only"
    with pytest.raises(InvalidRequest):
        swebench_eval_type("sometimes")


def test_without_swebench_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "swebench" or m.startswith("swebench.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "swebench", None)  # import swebench -> ImportError
    with pytest.raises(InvalidRequest, match=SWEBENCH_INSTALL_HINT.replace("[", r"\[")):
        grade_swebench("", [], [], exit_code=0)
    with pytest.raises(InvalidRequest, match="envhub-rl-swe"):
        swebench_log_parser("example/calc")
    assert grade_log(LOG, [f"{A}::test_a"], []).resolved  # envhub's own tasks: no swebench

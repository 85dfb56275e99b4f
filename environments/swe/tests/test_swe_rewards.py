"""SWE-bench grading: -rA log parsing and FULL/PARTIAL/NO resolution."""

from __future__ import annotations

from envhub.rewards.swe import Resolution, TestStatus, grade, parse_pytest_log

LOG = """\
============================= test session starts ==============================
tests/test_a.py ..F.sx                                                   [100%]
=================================== FAILURES ===================================
___________________________________ test_c ____________________________________
E   assert 1 == 2
==================================== PASSES ====================================
PASSED output that is not a summary line
=========================== short test summary info ============================
PASSED tests/test_a.py::test_a
PASSED tests/test_a.py::test_b[x - y]
FAILED tests/test_a.py::test_c - assert 1 == 2
SKIPPED [1] tests/test_a.py:20: no reason
XFAIL tests/test_a.py::test_e - known bug
ERROR tests/test_a.py::test_f[a]b] - fixture 'x' not found
XPASS tests/test_a.py::test_g
==================== 1 failed, 2 passed, 1 skipped in 0.1s =====================
"""


def test_parse_reads_the_short_summary() -> None:
    statuses = parse_pytest_log(LOG)
    assert statuses == {
        "tests/test_a.py::test_a": TestStatus.PASSED,
        "tests/test_a.py::test_b[x - y]": TestStatus.PASSED,
        "tests/test_a.py::test_c": TestStatus.FAILED,
        "tests/test_a.py::test_e": TestStatus.XFAIL,
        "tests/test_a.py::test_f[a]b]": TestStatus.ERROR,
        "tests/test_a.py::test_g": TestStatus.XPASS,
    }


def test_later_lines_win_and_garbage_is_ignored() -> None:
    log = "FAILED t.py::x - boom\nnot a line\nPASSED t.py::x\n"
    assert parse_pytest_log(log) == {"t.py::x": TestStatus.PASSED}
    assert parse_pytest_log("") == {}


def test_grade_full_partial_no() -> None:
    statuses = parse_pytest_log(LOG)
    a, b, c, e = (f"tests/test_a.py::{n}" for n in ("test_a", "test_b[x - y]", "test_c", "test_e"))
    full = grade(statuses, [a, e], [b])  # XFAIL counts as a pass
    assert full.resolution is Resolution.FULL and full.resolved and (full.f2p, full.p2p) == (1, 1)
    partial = grade(statuses, [a, c], [b])
    assert partial.resolution is Resolution.PARTIAL and partial.f2p == 0.5
    assert partial.failed_f2p == (c,)
    broken = grade(statuses, [a], [b, c])
    assert broken.resolution is Resolution.NO and broken.p2p == 0.5
    missing = grade(statuses, ["tests/test_a.py::nowhere"], [])
    assert missing.resolution is Resolution.NO and missing.f2p == 0.0
    assert grade({}, [], []).resolution is Resolution.FULL  # empty lists count as 1

"""SWE-bench grading: parse a pytest ``-rA`` log and grade FAIL_TO_PASS / PASS_TO_PASS.

Follows SWE-bench's harness (``swebench.harness.grading``) so a record graded here grades
the same there:

- a test's status is read from the short test summary lines ``PASSED id``,
  ``FAILED id - message``, ``ERROR id``, ``SKIPPED ...``, ``XFAIL id``, ``XPASS id``;
- XFAIL counts as a pass, a test missing from the log counts as a fail;
- f2p = passed F2P / |F2P|, p2p = passed P2P / |P2P|, an empty list counts as 1;
- FULL iff both are 1, PARTIAL iff 0 < f2p < 1 and p2p = 1, otherwise NO.

Pure functions on strings, no imports beyond the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "PASSING",
    "Grade",
    "Resolution",
    "TestStatus",
    "grade",
    "parse_pytest_log",
]


class TestStatus(str, Enum):
    __test__ = False  # not a pytest test class

    PASSED = "PASSED"
    FAILED = "FAILED"
    ERROR = "ERROR"
    SKIPPED = "SKIPPED"
    XFAIL = "XFAIL"
    XPASS = "XPASS"


#: statuses SWE-bench counts as a pass
PASSING = frozenset({TestStatus.PASSED, TestStatus.XFAIL})

_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (.+)$")
_SUMMARY = re.compile(r"^=+ short test summary info =+$")


def _node_id(rest: str) -> str | None:
    """The node id at the start of a summary line's remainder (None: not a node id).

    pytest appends `` - <message>`` to FAILED/ERROR lines; parameter ids may themselves
    contain `` - ``, so a bracketed parameter part is kept whole.
    """
    if rest.startswith("["):  # "SKIPPED [1] path:12: reason"
        return None
    dash = rest.find(" - ")
    bracket = rest.find("[")
    if bracket != -1 and (dash == -1 or bracket < dash):
        close = rest.find("]", bracket)
        if close != -1:
            after = rest[close + 1 :]
            while after and not after.startswith(" - ") and "]" in after:
                close = rest.find("]", close + 1)  # "]" inside the parameter id
                after = rest[close + 1 :]
            return rest[: close + 1]
    return (rest[:dash] if dash != -1 else rest).strip() or None


def parse_pytest_log(log: str) -> dict[str, TestStatus]:
    """Test id -> status from pytest's ``-rA`` short summary (later lines win).

    When the log has a ``short test summary info`` header only the lines after it are
    read, so captured output printed in a ``PASSES`` section cannot pose as a result.
    """
    lines = log.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if _SUMMARY.match(lines[i]):
            lines = lines[i + 1 :]
            break
    statuses: dict[str, TestStatus] = {}
    for raw in lines:
        m = _LINE.match(raw.rstrip())
        if not m:
            continue
        node = _node_id(m.group(2))
        if node:
            statuses[node] = TestStatus(m.group(1))
    return statuses


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
    """Grade a parsed log against an instance's FAIL_TO_PASS and PASS_TO_PASS lists."""
    f2p, failed_f2p = _fraction(list(fail_to_pass), statuses)
    p2p, failed_p2p = _fraction(list(pass_to_pass), statuses)
    if f2p == 1.0 and p2p == 1.0:
        resolution = Resolution.FULL
    elif 0.0 < f2p < 1.0 and p2p == 1.0:
        resolution = Resolution.PARTIAL
    else:
        resolution = Resolution.NO
    return Grade(f2p, p2p, resolution, tuple(failed_f2p), tuple(failed_p2p))

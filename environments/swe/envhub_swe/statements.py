"""Problem statements written from the failing tests' output by templates (no LLM).

An issue a user might file: which tests fail, the assertion they stop at, and how to
reproduce it. Only the failure's ``E`` lines are quoted, not the traceback's frames, so
the mutated line is not shown (unless the error message itself carries a traceback, as
a failing subprocess's does).
"""

from __future__ import annotations

import random
import re

__all__ = ["failure_excerpt", "problem_statement"]

_OPENINGS = (
    "After upgrading to this revision of {name}, some of its own tests fail.",
    "{name}: {count} test(s) started failing and I can't find a change to the tests.",
    "Something in {name} regressed: the test suite reports {count} failure(s).",
    "Bug report for {name} {version}: behaviour differs from what the test suite expects.",
)
_CLOSINGS = (
    "The tests are right; please fix the library so that they pass again without "
    "breaking the rest of the suite.",
    "Please fix the implementation (not the tests). All other tests must keep passing.",
    "Could you track down the cause and fix it in the library code? The tests should "
    "not need changes.",
)
_MAX_TESTS_LISTED = 8
_MAX_ERROR_LINES = 12


def failure_excerpt(log: str, test_id: str) -> str:
    """The ``E`` lines of ``test_id``'s failure section in a ``--tb=short`` log."""
    name = test_id.split("::")[-1]
    pattern = re.compile(r"^_{3,} (.+?) _{3,}$")
    lines = log.splitlines()
    start = None
    for i, line in enumerate(lines):
        m = pattern.match(line)
        if m and m.group(1).split(".")[-1] == name:
            start = i + 1
            break
    if start is None:
        return ""
    errors: list[str] = []
    for line in lines[start:]:
        if pattern.match(line) or line.startswith("=" * 5):
            break
        if line.startswith("E "):
            errors.append(line)
    if len(errors) > _MAX_ERROR_LINES:
        errors = [*errors[: _MAX_ERROR_LINES - 1], "E   ..."]
    return "\n".join(errors)


def problem_statement(
    *, name: str, version: str, failing: list[str], log: str, rng: random.Random
) -> str:
    """An issue text for a bug that makes ``failing`` fail (seeded wording)."""
    count = len(failing)
    listed = "\n".join(f"- `{t}`" for t in failing[:_MAX_TESTS_LISTED])
    if count > _MAX_TESTS_LISTED:
        listed += f"\n- ... and {count - _MAX_TESTS_LISTED} more"
    parts = [
        rng.choice(_OPENINGS).format(name=name, version=version, count=count),
        f"Failing tests:\n{listed}",
    ]
    excerpt = failure_excerpt(log, failing[0])
    if excerpt:
        parts.append(f"Running `pytest {failing[0]}` ends with:\n\n```\n{excerpt}\n```")
    parts.append(rng.choice(_CLOSINGS))
    return "\n\n".join(parts)

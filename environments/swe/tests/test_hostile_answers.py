"""The shared hostile-answer corpus (:mod:`envhub.testing.hostile`) against swe, in bubblewrap
sandboxes (the cheapest confined backend): each text is a ``bash`` command and then the
first line of the package's module, so the submitted patch runs it when grading imports
the package. Every episode is scored as a plain wrong answer, nothing it runs reaches
the host, and the episodes scored afterwards get a clean run's rewards.

An episode costs two sandboxes and a test run, so this takes the corpus's code and
shell injections and reply-channel forgeries that can run here (valid Python for the
module, or shell syntax for ``bash``) and its text that is not printable; its resource
bombs are left out (as Python in the module, ``9**9**9**9`` would hold grading to the
test timeout).
"""

from __future__ import annotations

import os

import pytest

import envhub
from envhub.sandboxes import bwrap_problem
from envhub.task import GoldCall
from envhub.testing import check_hostile_answers
from envhub.testing.hostile import HOSTILE_ANSWERS

TASK = "inflection__flip_boolean-d15dde55"  # gold: one line of inflection/__init__.py


def _run_then_patch(text: str) -> list[GoldCall]:
    return [
        GoldCall(name="bash", arguments={"command": text}),
        GoldCall(name="str_replace_editor", arguments={
            "command": "insert", "path": "inflection/__init__.py", "insert_line": 0,
            "new_str": text}),
        GoldCall(name="submit"),
    ]  # fmt: skip


#: how the corpus's shell injections start: ``$(...)``, backquotes, ``1; touch``
_SHELL_INJECTIONS = ("$(", "`", "1; ")


def _runs_here(raw: str) -> bool:
    """Whether a code injection or forgery is a Python module line or a shell command."""
    if raw.startswith(_SHELL_INJECTIONS):
        return True
    try:
        compile(raw, "<answer>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


#: the corpus's code injections and forgeries that are a Python module line or a shell
#: command, and its texts that are not printable (a container per episode: a subset)
SUBSET = [
    raw
    for raw in HOSTILE_ANSWERS
    if (("{marker}" in raw or "score" in raw) and _runs_here(raw)) or not raw.isprintable()
]


async def test_hostile_answers_score_as_a_plain_wrong_answer() -> None:
    if problem := bwrap_problem():
        if os.environ.get("ENVHUB_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bwrap required (ENVHUB_REQUIRE_BWRAP=1) but {problem}")
        pytest.skip(problem)
    env = envhub.make("swe", sandbox="bwrap")
    # sandboxes mostly wait: four episodes in flight, the same CPU in two thirds the time
    await check_hostile_answers(env, TASK, _run_then_patch, plain_wrong="0", answers=SUBSET,
                                concurrency=4)  # fmt: skip

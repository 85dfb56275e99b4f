"""``check_hostile_answers`` catches what it exists to catch: a scorer that runs the
model's text (a marker file appears on the host, named per answer) and a reward the text
can forge, with the corpus running several episodes at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envhub import Environment, LocalEnvironment, Task, TaskSet, tool
from envhub.task import GoldCall
from envhub.testing import check_hostile_answers

_WRITE = re.compile(r"open\('([^']+)'")


class Gullible(Environment):
    """Scores ``submit(text)``, as a careless upstream scorer would: a text that opens a
    file for writing creates it (what ``eval`` of it would do), and one that imports
    anything scores 1."""

    name = "gullible"

    def __init__(self) -> None:
        super().__init__()
        self.submitted = ""

    def load_tasks(self) -> TaskSet:
        gold = [GoldCall(name="submit", arguments={"text": "42"})]
        return TaskSet([Task(id="t", prompt=[{"role": "user", "content": "say 42"}],
                             answer="42", gold_actions=gold)])  # fmt: skip

    @tool
    def submit(self, text: str) -> str:
        """Submit an answer.

        Args:
            text: The answer.
        """
        self.submitted = text
        if match := _WRITE.search(text):
            Path(match.group(1)).write_text("x")
        return "submitted"

    def reward(self) -> float:
        return 1.0 if self.submitted == "42" or "__import__" in self.submitted else 0.0


async def test_a_scorer_that_runs_or_trusts_the_text_fails_the_check_by_answer() -> None:
    env = LocalEnvironment(Gullible)
    answers = ["harmless", "open('{marker}','w').write('x')", "__import__('os')", "'; --"]
    with pytest.raises(AssertionError) as failed:
        await check_hostile_answers(
            env, "t", lambda text: [GoldCall(name="submit", arguments={"text": text})],
            answers=answers, concurrency=3,
        )  # fmt: skip
    report = str(failed.value)
    assert report.startswith("2 hostile answer(s) did not hold")
    assert re.search(r"\"open\('/\S+/ran-on-the-host-1',.*: wrote /\S+/ran-on-the-host-1 on ",
                     report)  # fmt: skip
    forged = "\"__import__('os')\": reward 1.0 (masked: None), a plain wrong answer gets 0.0"
    assert forged in report
    assert "harmless" not in report and "'; --" not in report

"""A scripted-user environment: three questions (two user turns after the first), and a
tool (``multiply``) that joins the tool set only at the last question.

Hosted by the server tests by its ``module:Class`` id (:data:`ENV_ID`). The model answers
each question with a plain-text final answer or with the terminal ``answer`` tool; the
reward is the fraction of questions answered right.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from envhub import (
    Budgets,
    Environment,
    Reward,
    SessionHandle,
    StepResult,
    Task,
    TaskSet,
    ToolSpec,
    UserTurn,
    tool,
)

ENV_ID = f"{__name__}:ScriptedUserEnv"

QUESTIONS = ("What is 2 + 3?", "Add 10 to that.", "Multiply that by 4.")
ANSWERS = ("5", "15", "60")
LATE_TOOL = "multiply"
LATE_TOOL_QUESTION = 2  # the question from which `multiply` is in force


class ScriptedUserEnv(Environment):
    name = "scripted-user"
    version = "0.1.0"
    budgets = Budgets(max_turns=20)
    #: an instance's ``end_episode`` reason when asked for a user turn after this many answers
    stop_after: ClassVar[int | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[str | None] = []

    def load_tasks(self) -> TaskSet:
        return TaskSet([Task(id="chat-0", prompt=[{"role": "user", "content": QUESTIONS[0]}])])

    def episode_tools(self) -> Mapping[str, ToolSpec]:
        """Every tool but ``multiply``, which the last user turn adds."""
        return {k: v for k, v in type(self).tool_specs().items() if k != LATE_TOOL}

    @tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a + b

    @tool
    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a * b

    @tool(terminal=True)
    def answer(self, value: str) -> str:
        """Give the answer to the current question.

        Args:
            value: The answer.
        """
        self.final_answer = value
        return "recorded"

    async def next_user_turn(self) -> UserTurn | None:
        self.answers.append(self.final_answer)
        asked = len(self.answers)
        if self.stop_after is not None and asked >= self.stop_after:
            self.end_episode("user_left")
        if asked >= len(QUESTIONS):
            return None
        tools = type(self).tool_specs() if asked == LATE_TOOL_QUESTION else None
        return UserTurn([QUESTIONS[asked]], tools=tools)

    def reward(self) -> Reward:
        given = zip(self.answers, ANSWERS, strict=False)  # fewer answers when cut short
        right = [a is not None and a.strip() == b for a, b in given]
        return Reward(value=sum(right) / len(ANSWERS), info={"answers": self.answers})


class LeavingUserEnv(ScriptedUserEnv):
    """Ends the episode (``env:user_left``) when asked for the second user turn."""

    stop_after = 2


class BrokenUserEnv(ScriptedUserEnv):
    """A scripted user that crashes."""

    async def next_user_turn(self) -> UserTurn | None:
        raise RuntimeError("the user simulator is down")


class WrongTypeUserEnv(ScriptedUserEnv):
    """A scripted user that returns a bare string instead of a UserTurn."""

    async def next_user_turn(self) -> UserTurn | None:
        return "next question?"  # type: ignore[return-value]


def _call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


CONVERSATION: list[tuple[list[dict[str, Any]], str | None]] = [
    ([_call("add", "c0", a=2, b=3)], None),
    ([], "5"),  # -> user turn: QUESTIONS[1]
    ([_call("multiply", "c2", a=15, b=4)], None),  # not in force yet: an error observation
    ([_call("add", "c3", a=5, b=10)], None),
    ([], "15"),  # -> user turn: QUESTIONS[2], multiply added
    ([_call("multiply", "c5", a=15, b=4)], None),
    ([], "60"),  # -> the end: reward 1
]
"""A whole episode of :class:`ScriptedUserEnv` as (tool calls, content) per assistant turn."""


async def play(session: SessionHandle) -> list[StepResult]:
    """Step ``session`` through :data:`CONVERSATION`; the step results in order."""
    return [await session.step(calls, content=content) for calls, content in CONVERSATION]


def check_played(results: list[StepResult]) -> None:
    """What any transport must answer to :data:`CONVERSATION`."""
    assert [r.done for r in results] == [False] * 6 + [True]
    assert results[-1].stop_reason == "final_answer" and results[-1].reward == 1.0
    users = [[m["content"] for m in r.user_messages] for r in results]
    assert users == [[], [QUESTIONS[1]], [], [], [QUESTIONS[2]], [], []]
    assert [r.tools is not None for r in results] == [False] * 4 + [True, False, False]
    new_tools = results[4].tools or []
    assert sorted(t["function"]["name"] for t in new_tools) == ["add", "answer", LATE_TOOL]
    early, late = results[2].observations[0], results[5].observations[0]
    assert early.is_error and f"unknown tool {LATE_TOOL!r}" in early.content
    assert not late.is_error and late.content == "60"

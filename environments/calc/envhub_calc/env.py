"""The ``calc`` environment: a calculator tool and a terminal ``answer`` tool."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from envhub import Budgets, Environment, Reward, TaskSet, tool
from envhub.rewards import Rubric, numeric_match
from envhub_calc.calculator import evaluate
from envhub_calc.problems import generate_tasks

__all__ = ["CalcEnv"]


class CalcEnv(Environment):
    """Multi-step arithmetic word problems, scored by numeric match of the answer."""

    name = "calc"
    version = "0.1.0"
    budgets = Budgets(max_turns=8, tool_timeout_s=5.0, episode_timeout_s=120.0)
    rubric = Rubric({"correct": 1.0, "answered": 0.0})
    # a client's task set is generated on the server's CPU and kept in its memory: bounded
    client_options: ClassVar[dict[str, Any]] = {
        "num_tasks": Annotated[int, Field(ge=1, le=10_000)],
        "seed": Annotated[int, Field(ge=0, lt=2**32)],
    }

    def __init__(self, num_tasks: int = 3000, seed: int = 0) -> None:
        super().__init__()
        self.num_tasks = int(num_tasks)
        self.seed = int(seed)
        self.submitted: str | None = None

    def load_tasks(self) -> TaskSet:
        return TaskSet(generate_tasks(self.num_tasks, self.seed))

    @tool
    async def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: Numbers with + - * / // % ** and parentheses, e.g. "(3 + 4) * 2".
        """
        value = evaluate(expression)
        return str(int(value)) if float(value).is_integer() else repr(round(value, 10))

    @tool(terminal=True)
    async def answer(self, value: str) -> str:
        """Submit the final numeric answer; this ends the episode.

        Args:
            value: The final answer as a number, e.g. "42" or "3.50".
        """
        self.submitted = str(value)
        return "answer recorded"

    async def snapshot(self) -> dict[str, Any]:
        """The episode is the task and the submitted answer: a fork copies them (O(1) in
        the episode's length, where a replay would rerun every calculation)."""
        return self.copied_state("submitted")

    async def restore(self, state: object) -> None:
        self.restore_copied(state)

    def reward(self) -> Reward:
        answered = self.submitted is not None
        correct = (
            numeric_match(self.submitted, self.task.answer, rel_tol=0, abs_tol=0.005)
            if answered
            else 0.0
        )
        return self.rubric.score(
            {"correct": correct, "answered": float(answered)}, submitted=self.submitted
        )

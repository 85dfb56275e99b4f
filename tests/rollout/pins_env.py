"""An environment whose tasks are a JSONL file named by its ``path`` option, for the pin
tests: editing the file between two runs changes the task set, as a user's dataset
changes. Used by its ``module:Class`` id (:data:`ENV_ID`); it belongs to no distribution."""

from __future__ import annotations

from envhub import Environment, TaskSet, tool

ENV_ID = f"{__name__}:FileTasks"


class FileTasks(Environment):
    name = "file-tasks"
    version = "1.0.0"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.given: str | None = None

    def load_tasks(self) -> TaskSet:
        return TaskSet.from_jsonl(self.path)

    @tool(terminal=True)
    def answer(self, value: str) -> str:
        """Submit the answer.

        Args:
            value: The answer.
        """
        self.given = value
        return "submitted"

    def reward(self) -> float:
        return float(self.given == self.task.answer)

"""An environment with turn-level rewards, for the turn-reward tests (hosted by its
``module:Class`` id, :data:`ENV_ID`).

The task is to mark two items, ``a`` and ``b``, then ``submit``. Each turn is rewarded
by what it achieved: +0.5 per item marked for the first time, -0.25 per repeated or
unknown item, 0.0 for a turn whose calls marked nothing (a ``submit``); a turn without
tool calls (a final answer) gets no turn reward (``None``). The final reward is 1.0 when
both items are marked, else 0.0. ``turn_value`` (an option) replaces every turn's reward
with one value: the hostile-value tests give it NaN, infinity or a bool.
"""

from __future__ import annotations

from typing import Any

from envhub import Budgets, Environment, Task, TaskSet, tool

ENV_ID = f"{__name__}:MarkEnv"
ITEMS = ("a", "b")

SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "mark", "arguments": '{"item": "a"}'}]},
    {"tool_calls": [{"name": "mark", "arguments": '{"item": "a"}'}]},
    {"tool_calls": [{"name": "mark", "arguments": '{"item": "b"}'}]},
    {"tool_calls": [{"name": "submit", "arguments": "{}"}]},
]
"""The scripted model's turns: a, a again, b, submit."""
TURN_REWARDS = [0.5, -0.25, 0.5, 0.0]
"""What the environment gives each turn of :data:`SCRIPT` (the final reward is 1.0)."""


class MarkEnv(Environment):
    name = "mark"
    version = "0.1.0"
    budgets = Budgets(max_turns=10)

    def __init__(self, turn_value: Any = None) -> None:
        super().__init__()
        self.turn_value = turn_value
        self.marked: set[str] = set()
        self.earned: float | None = None  # this turn's reward so far; None: no call yet

    def load_tasks(self) -> TaskSet:
        prompt = [{"role": "user", "content": "Mark a and b, then submit."}]
        return TaskSet([Task(id="mark-0", prompt=prompt), Task(id="mark-1", prompt=prompt)])

    @tool
    def mark(self, item: str) -> str:
        """Mark an item.

        Args:
            item: The item to mark.
        """
        new = item in ITEMS and item not in self.marked
        self.marked.add(item)
        self.earned = (self.earned or 0.0) + (0.5 if new else -0.25)
        return "marked" if new else "already marked or unknown"

    @tool(terminal=True)
    def submit(self) -> str:
        """Submit the marks."""
        self.earned = self.earned or 0.0
        return "submitted"

    def turn_reward(self) -> float | None:
        earned, self.earned = self.earned, None
        return earned if self.turn_value is None else self.turn_value

    def reward(self) -> float:
        return 1.0 if self.marked >= set(ITEMS) else 0.0

"""A task set of known difficulty for the curriculum tests: easy, medium and impossible.

A task asks for ``steps`` calls of ``step(i)`` in order (its gold actions), then a final
answer; it passes when every step was taken. With the reference policy's
``wrong_action_p = q`` a sample passes with probability ``(1 - q) ** steps`` (a wrong
action at a step's turn loses that step), drawn deterministically per task, sample and
turn: with ``q = 0.1`` the one-step tasks pass 90% of the time, the six-step ones 53%,
and an impossible task never (its reward is 0 whatever happens). ``delay_s`` slows each
step, so a test can kill a run in the middle. Used by its ``module:Class`` id
(:data:`ENV_ID`); it belongs to no distribution.
"""

from __future__ import annotations

import asyncio

from envhub import Environment, Task, TaskSet, tool
from envhub.task import GoldCall

ENV_ID = f"{__name__}:Difficulty"
STEPS = {"easy": 1, "medium": 6, "impossible": 1}


def _task(kind: str, number: int) -> Task:
    steps = STEPS[kind]
    return Task(
        id=f"{kind}-{number}",
        prompt=[{"role": "user", "content": f"call step(i) for i in 0..{steps - 1}, then stop"}],
        answer="done",
        gold_actions=[GoldCall(name="step", arguments={"index": i}) for i in range(steps)],
        metadata={"kind": kind, "steps": steps},
    )


class Difficulty(Environment):
    name = "difficulty"
    version = "1.0.0"

    def __init__(self, per_kind: int = 2, delay_s: float = 0.0) -> None:
        super().__init__()
        self.per_kind = per_kind
        self.delay_s = delay_s
        self.taken: list[int] = []

    def load_tasks(self) -> TaskSet:
        return TaskSet(_task(kind, n) for kind in STEPS for n in range(self.per_kind))

    @tool
    async def step(self, index: int) -> str:
        """Take a step.

        Args:
            index: Which step.
        """
        await asyncio.sleep(self.delay_s)
        self.taken.append(index)
        return f"step {index} taken"

    def reward(self) -> float:
        if self.task.metadata["kind"] == "impossible":
            return 0.0
        return float(self.taken == list(range(self.task.metadata["steps"])))

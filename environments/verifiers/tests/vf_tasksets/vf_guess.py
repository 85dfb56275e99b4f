"""A multi-turn taskset written against verifiers' public v1 API (the MultiTurnEnv
shape): each ``guess`` is answered by the environment (higher / lower / correct) from
state the task toolset keeps per rollout; the reward pays for finding the number and for
finding it in few guesses."""

import verifiers.v1 as vf
from pydantic import Field


class GuessData(vf.TaskData):
    secret: int
    answer: str = ""
    gold_actions: list[dict] = Field(default_factory=list)


class Oracle(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None

    def __init__(self, config: vf.ToolsetConfig) -> None:
        super().__init__(config)
        self.secret = 0
        self.guesses = 0

    async def setup_task(self, task: "GuessData") -> None:
        self.secret = task.secret

    @vf.tool
    async def guess(self, number: int) -> str:
        """Guess the secret number between 1 and 100."""
        self.guesses += 1
        if number == self.secret:
            return "correct"
        return "higher" if number < self.secret else "lower"


class GuessTask(vf.Task[GuessData]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [Oracle(vf.ToolsetConfig())]

    @vf.reward(weight=0.5)
    async def found(self, task: GuessData, trace: vf.Trace) -> float:
        return 1.0 if any(m.content == "correct" for m in trace.tool_messages) else 0.0

    @vf.reward(weight=0.5)
    async def efficiency(self, trace: vf.Trace) -> float:
        guesses = len(trace.tool_messages)
        return 1.0 / guesses if guesses else 0.0


class GuessTaskset(vf.Taskset[GuessTask]):
    def load(self):
        for secret in (17, 64):
            gold = [{"name": "guess", "arguments": {"number": secret}}]
            yield GuessTask(
                GuessData(prompt="Find my number (1-100).", secret=secret,
                          answer=str(secret), gold_actions=gold),
                self.config.task,
            )


__all__ = ["GuessTaskset"]

if __name__ == "__main__":  # verifiers serves a toolset as `python -m <its module>`
    Oracle.run()

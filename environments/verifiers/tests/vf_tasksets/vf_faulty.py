"""A taskset with a careless reward function, as tasksets have them: it ``eval``s the
model's reply (so a reply that is no expression raises, and a reply may run code), and
reads module-level state that such code can set. What the bridge does when verifiers'
scoring fails, and what one episode's answer can do to another's reward."""

import verifiers.v1 as vf
from vf_arith import ArithData, Calculator

LENIENCY = 0.0  # the score of a wrong answer: module state, read at every scoring


class FaultyTask(vf.Task[ArithData]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [Calculator(vf.ToolsetConfig())]

    @vf.reward
    async def exact(self, task: ArithData, trace: vf.Trace) -> float:
        value = eval(trace.last_reply, globals())  # the careless part
        return 1.0 if value == int(task.answer) else LENIENCY


class FaultyTaskset(vf.Taskset[FaultyTask]):
    def load(self):
        yield FaultyTask(ArithData(prompt="What is 2 + 3?", answer="5"), self.config.task)


__all__ = ["FaultyTaskset"]

"""A taskset whose reward function raises on some answers, as a sloppy parser does
(``int()`` of the model's reply): what the bridge does when verifiers' scoring fails."""

import verifiers.v1 as vf
from vf_arith import ArithData, Calculator


class FaultyTask(vf.Task[ArithData]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [Calculator(vf.ToolsetConfig())]

    @vf.reward
    async def exact(self, task: ArithData, trace: vf.Trace) -> float:
        return 1.0 if int(trace.last_reply) == int(task.answer) else 0.0


class FaultyTaskset(vf.Taskset[FaultyTask]):
    def load(self):
        yield FaultyTask(ArithData(prompt="What is 2 + 3?", answer="5"), self.config.task)


__all__ = ["FaultyTaskset"]

"""A tool taskset written against verifiers' public v1 API (the ToolEnv shape): an
``add`` tool in a task toolset and a rubric of two weighted reward functions."""

import verifiers.v1 as vf
from pydantic import Field


class ArithData(vf.TaskData):
    answer: str
    gold_actions: list[dict] = Field(default_factory=list)


class Calculator(vf.Toolset[vf.ToolsetConfig]):
    @vf.tool
    async def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)


class ArithTask(vf.Task[ArithData]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [Calculator(vf.ToolsetConfig())]

    @vf.reward(weight=0.75)
    async def correct(self, task: ArithData, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply == task.answer else 0.0

    @vf.reward(weight=0.25)
    async def used_tool(self, trace: vf.Trace) -> float:
        return 1.0 if trace.tool_messages else 0.0

    @vf.metric
    async def turns(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)


class ArithTaskset(vf.Taskset[ArithTask]):
    def load(self):
        for a, b in [(2, 3), (40, 2), (7, 8)]:
            yield ArithTask(
                ArithData(
                    prompt=f"What is {a} + {b}? Use the tool.",
                    answer=str(a + b),
                    gold_actions=[{"name": "calculator_add", "arguments": {"a": a, "b": b}}],
                ),
                self.config.task,
            )


__all__ = ["ArithTaskset"]

if __name__ == "__main__":  # verifiers serves a toolset as `python -m <its module>`
    Calculator.run()

"""The reverse direction: a verifiers taskset whose tools are an envhub environment's,
reached through envhub's MCP door (``envhub serve calc --mcp``). The toolset launches
nothing: its config names the running server (``ToolsetConfig(url=...)``), which the test
passes in ``ENVHUB_CALC_MCP_URL`` (a test taskset; a real one would take it from its
config)."""

import os

import verifiers.v1 as vf


class Calc(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # envhub's tool names as they are: calculate, answer


class CalcTask(vf.Task[vf.TaskData]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [Calc(vf.ToolsetConfig(url=os.environ["ENVHUB_CALC_MCP_URL"]))]

    @vf.reward
    async def computed_by_envhub(self, trace: vf.Trace) -> float:
        return 1.0 if any(m.content == "5" for m in trace.tool_messages) else 0.0


class CalcTaskset(vf.Taskset[CalcTask]):
    def load(self):
        yield CalcTask(vf.TaskData(prompt="What is 2 + 3? Use calculate, then answer."),
                       self.config.task)


__all__ = ["CalcTaskset"]

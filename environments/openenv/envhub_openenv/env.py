"""The ``openenv`` environment: any OpenEnv environment, reached as OpenEnv deploys it.

Options (operator configuration only: none is a ``client_option``, since each names a
server to reach, a command to run, an image to start or a file to read):

- the server, exactly one of ``url=`` (running), ``command=`` (started by envhub, with
  ``{port}`` for the port) or ``image=`` (run by envhub with its container policy,
  :mod:`envhub_openenv.servers`);
- the tasks: ``tasks=`` (a JSONL/Parquet task file; each task's ``metadata.reset`` is
  the keyword arguments of OpenEnv's ``reset``, e.g. ``{"seed": 7}``) or ``seeds=N``
  (tasks ``seed-0`` ... ``seed-<N-1>``, each resetting with its seed);
- ``reward=`` ``"sum"`` (default: the episode's return, the sum of the step rewards) or
  ``"last"`` (the reward of the last step that gave one), see :meth:`OpenEnvEnv.reward`;
- ``action_tool=`` the name of the one tool of an action-model environment (``step``).

An MCP environment (one whose ``POST /mcp`` lists tools) offers its tools; any other
offers one tool whose parameters are the JSON schema of its ``Action`` model (``GET
/schema``, without the base class's ``metadata`` field). Either way a call is one
``step`` of the episode's WebSocket session (an MCP call as OpenEnv's ``CallToolAction``,
so the environment's rewards and ``done`` apply), its observation the tool result, its
``done`` the end of the episode (stop reason ``env:done``).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import mcp_types
from envhub_mcp import ServerToolError
from envhub_mcp.tools import ForwardedCall, ServerTool, render_result, server_tool

from envhub import Budgets, Environment, Reward, Task, TaskSet, ToolSpec
from envhub.errors import EnvironmentFailure, OptionsRequired
from envhub.types import Message
from envhub_openenv.protocol import (
    OpenEnvSession,
    StepOutcome,
    fetch_action_schema,
    list_mcp_tools,
)
from envhub_openenv.servers import (
    ServerSource,
    base_url,
    hold,
    parse_source,
    release,
    stop_servers,
)

__all__ = ["OpenEnvEnv"]

RewardRule = Literal["sum", "last"]
RUBRIC_KEY = "rubric"  #: the observation metadata key whose numbers are reward components
_FORWARD = "call_server_tool"

# the tools each server offers, learnt once per process: (source, action tool) -> specs
_TOOLS: dict[tuple[ServerSource, str], tuple[bool, dict[str, ToolSpec]]] = {}


def _action_tool(name: str, schema: dict[str, Any]) -> ServerTool:
    parameters = {k: v for k, v in schema.items() if k != "title"}
    properties = {k: v for k, v in parameters.get("properties", {}).items() if k != "metadata"}
    parameters["properties"] = properties
    if "required" in parameters:
        parameters["required"] = [r for r in parameters["required"] if r in properties]
    what = schema.get("description") or schema.get("title") or "an action"
    return ServerTool(name=name, description=f"Take one step of the environment: {what}",
                      attr=_FORWARD, args_model=ForwardedCall, terminal=False, timeout=None,
                      is_async=True, input_schema=parameters)


def _render(outcome: StepOutcome) -> str:
    """The text the model reads for an observation: an MCP tool result as envhub's MCP
    environments render one, any other observation's fields as JSON."""
    result = outcome.observation.get("result")
    if "tool_name" in outcome.observation and isinstance(result, dict) and "content" in result:
        return render_result(mcp_types.CallToolResult.model_validate(result))
    return json.dumps(outcome.observation, ensure_ascii=False, default=str)


class OpenEnvEnv(Environment):
    """An OpenEnv environment over its WebSocket session protocol (module docstring)."""

    name = "openenv"
    version = "0.1.0"
    budgets: ClassVar[Budgets] = Budgets(max_turns=30, tool_timeout_s=60.0,
                                         episode_timeout_s=900.0)

    def __init__(
        self,
        *,
        url: str | None = None,
        command: str | list[str] | None = None,
        image: str | None = None,
        tasks: str | None = None,
        seeds: int | None = None,
        reward: RewardRule = "sum",
        action_tool: str = "step",
        startup_timeout_s: float = 120.0,
    ) -> None:
        super().__init__()
        if url is None and command is None and image is None:
            raise OptionsRequired("openenv needs the OpenEnv server as url=, command= or "
                                  "image=, and its tasks as tasks= or seeds=N")
        try:
            self.source = parse_source(url, command, image)
        except ValueError as exc:
            raise TypeError(str(exc)) from None
        if (tasks is None) == (seeds is None):
            raise TypeError("give the tasks as exactly one of tasks= (a task file) or seeds=N")
        if seeds is not None and not 1 <= int(seeds) <= 1_000_000:
            raise TypeError(f"seeds={seeds!r}: give 1 to 1000000 seeds")
        if reward not in ("sum", "last"):
            raise TypeError(f"reward={reward!r}: use 'sum' or 'last'")
        self.tasks_path, self.seeds = tasks, None if seeds is None else int(seeds)
        self.reward_rule: RewardRule = reward
        self.action_tool = action_tool
        self.startup_timeout_s = float(startup_timeout_s)
        self._session: OpenEnvSession | None = None
        self._holds_server = False  # between hold() in reset and release() in close
        self._is_mcp = False
        self.step_rewards: list[float | None] = []
        self.rubric: dict[str, float] = {}
        self._turn: list[float] = []
        self.done = False

    # -- tasks and tools ---------------------------------------------------------------------

    def load_tasks(self) -> TaskSet:
        if self.tasks_path is not None:
            return TaskSet.from_file(self.tasks_path)
        assert self.seeds is not None
        return TaskSet(Task(id=f"seed-{i}", prompt=[], metadata={"reset": {"seed": i}})
                       for i in range(self.seeds))

    def _learn_tools(self, url: str) -> tuple[bool, dict[str, ToolSpec]]:
        key = (self.source, self.action_tool)
        if key not in _TOOLS:
            listed = list_mcp_tools(url, self.startup_timeout_s)
            if listed is None:
                tools: dict[str, ToolSpec] = {
                    self.action_tool: _action_tool(self.action_tool, fetch_action_schema(url))}
            else:
                tools = {t["name"]: server_tool(mcp_types.Tool.model_validate(t))
                         for t in listed}
            _TOOLS[key] = (listed is not None, tools)
        return _TOOLS[key]

    def episode_tools(self) -> Mapping[str, ToolSpec]:
        """The server's tools, learnt once per process and server (starting the server
        if envhub runs it). Blocks: the session asks from a worker thread."""
        return self._learn_tools(base_url(self.source, self.startup_timeout_s))[1]

    # -- episode -----------------------------------------------------------------------------

    async def reset(self, task: Task) -> list[Message]:
        messages = await super().reset(task)
        kwargs = task.metadata.get("reset", {})
        if not isinstance(kwargs, dict):
            raise EnvironmentFailure(f"task {task.id}: metadata.reset is not an object")
        url = await asyncio.to_thread(base_url, self.source, self.startup_timeout_s)
        self._is_mcp = (await asyncio.to_thread(self._learn_tools, url))[0]
        hold(self.source)
        self._holds_server = True
        self._session = OpenEnvSession(url)
        await self._session.open()
        first = await self._session.reset(**kwargs)
        if first.observation:
            messages.append({"role": "user", "content": _render(first)})
        return messages

    async def call_server_tool(self, tool: str, arguments: dict[str, Any]) -> str:
        """One validated call as one step of the session (the target of every tool)."""
        if self._session is None:
            raise EnvironmentFailure("call_server_tool before reset")
        action = ({"type": "call_tool", "tool_name": tool, "arguments": arguments}
                  if self._is_mcp else arguments)
        try:
            outcome = await self._session.step(action)
        finally:
            for late in self._session.take_late():
                self._record(late)
        self._record(outcome)
        error = outcome.observation.get("error")
        if self._is_mcp and isinstance(error, dict):
            raise ServerToolError(str(error.get("message", error)))
        return _render(outcome)

    def _record(self, outcome: StepOutcome) -> None:
        """Count one step the server ran: its reward, rubric scores and ``done``."""
        self.step_rewards.append(outcome.reward)
        if outcome.reward is not None:
            self._turn.append(outcome.reward)
        components = outcome.metadata.get(RUBRIC_KEY)
        if isinstance(components, dict):
            self.rubric = {str(k): float(v) for k, v in components.items()
                           if isinstance(v, int | float) and not isinstance(v, bool)
                           and math.isfinite(v)}
        if outcome.done and not self.done:
            self.done = True
            self.end_episode("done")

    def turn_reward(self) -> float | None:
        """The sum of the rewards the turn's steps gave (``None``: none gave one)."""
        rewards, self._turn = self._turn, []
        return sum(rewards) if rewards else None

    def reward(self) -> Reward:
        """``reward="sum"``: the sum of the step rewards (the episode's return, OpenEnv's
        rewards being per step); ``"last"``: the last reward given. No reward at all
        (no step, or none gave one) is 0. The components are the rubric scores the last
        step that reported any put in its ``metadata["rubric"]``."""
        given = [r for r in self.step_rewards if r is not None]
        value = sum(given) if self.reward_rule == "sum" else (given[-1] if given else 0.0)
        return Reward(value=value, components=dict(self.rubric),
                      info={"step_rewards": self.step_rewards, "done": self.done,
                            "rule": self.reward_rule})

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        if self._holds_server:
            self._holds_server = False
            await asyncio.to_thread(release, self.source)

    @classmethod
    async def aclose_shared(cls) -> None:
        await asyncio.to_thread(stop_servers)
        _TOOLS.clear()

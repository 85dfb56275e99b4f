"""The ``verifiers`` environment: a verifiers (v1) taskset run under envhub.

The operator names the taskset as verifiers does (``taskset=``: the id of an installed
taskset package, or a module found on ``path=``), its options (``taskset_args=``, the
``[env.taskset]`` keys of a verifiers config), the verifiers interpreter (``python=``),
how long the worker may take to import verifiers and load the taskset
(``startup_timeout_s=``) and one episode's scoring (``score_timeout_s=``: CPU and wall
time of the process it is scored in; judges count). Clients of ``envhub serve`` choose
none of them: each would pick code to run on the server's machine.

Mapping: each task of ``Taskset.load()`` is an envhub task (id: the task's source id,
else its content key, so ids are stable); the tools of the taskset's and the task's
toolsets are envhub tools (verifiers' names and schemas); the model's final message
(an assistant message without tool calls) ends the episode, as verifiers' chat harness
ends it; ``reward()`` rebuilds a verifiers ``Trace`` from the transcript this environment
holds and scores it with ``Task.score``, each ``@vf.reward`` function and judge a
component, the value their weighted sum (verifiers' ``Trace.reward``). Judges are
verifiers config (``taskset_args={"task": {"judges": [...]}}``, each entry naming its
endpoint) and call it from the episode's scoring process; a judge that fails (endpoint
down or erring, no verdict) is a :class:`~envhub.errors.JudgeError`, masking the episode.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import mcp_types
from envhub_mcp.tools import server_tool

from envhub import Budgets, Environment, Reward, Task, TaskSet, ToolSpec
from envhub.errors import EnvironmentFailure, OptionsRequired, SandboxError
from envhub.model_text import valid_text
from envhub.types import Message, ToolCall
from envhub_verifiers.worker import (
    Worker,
    WorkerError,
    WorkerKey,
    bridge_loop,
    default_python,
    stop_workers,
    worker_for,
)

__all__ = ["VerifiersEnv"]


def _wire_arguments(arguments: str | dict[str, Any]) -> str:
    """A call's arguments as the chat wire carries them (a JSON string), whatever the
    model sent: text stays as it is (made valid UTF-8), an object is encoded (``ToolCall``
    already cut it to envhub's nesting limit; one no encoder can write, an integer of
    more than 4,300 digits, is recorded as a placeholder the reward functions see as
    unparseable)."""
    if isinstance(arguments, str):
        return valid_text(arguments)
    try:
        return valid_text(json.dumps(arguments, ensure_ascii=False))
    except (ValueError, RecursionError):
        return "<arguments that cannot be encoded>"


class VerifiersEnv(Environment):
    """A verifiers taskset as an environment (see the module docstring)."""

    name = "verifiers"
    version = "0.1.0"
    budgets: ClassVar[Budgets] = Budgets(max_turns=16, tool_timeout_s=60.0,
                                          episode_timeout_s=900.0)

    def __init__(
        self,
        taskset: str | None = None,
        *,
        taskset_args: dict[str, Any] | str | None = None,
        path: str | list[str] | None = None,
        python: str | None = None,
        startup_timeout_s: float = 300.0,
        score_timeout_s: float = 300.0,
    ) -> None:
        super().__init__()
        if not taskset:
            raise OptionsRequired("verifiers needs taskset= (a verifiers taskset id or "
                                  "module, as `vf-eval <taskset>` takes it)")
        if isinstance(taskset_args, str):
            try:
                taskset_args = json.loads(taskset_args)
            except json.JSONDecodeError:
                raise TypeError("taskset_args= is a JSON object") from None
        if taskset_args is not None and not isinstance(taskset_args, dict):
            raise TypeError("taskset_args= is a JSON object")
        paths = path.split(os.pathsep) if isinstance(path, str) else list(path or [])
        self.key = WorkerKey(
            python=str(python or default_python()),
            taskset=taskset,
            kwargs_json=json.dumps(taskset_args or {}, sort_keys=True),
            path=tuple(os.path.abspath(p) for p in paths if p),
            startup_timeout_s=float(startup_timeout_s),
            score_timeout_s=float(score_timeout_s),
        )
        self._worker: Worker | None = None
        self._episode: str | None = None
        self._transcript: list[Message] = []

    # -- listing -----------------------------------------------------------------------

    def _listing(self) -> dict[str, Any]:
        if self._worker is not None and self._worker.listing is not None:
            return self._worker.listing
        worker = bridge_loop().call(worker_for(self.key))
        assert worker.listing is not None
        return worker.listing

    def load_tasks(self) -> TaskSet:
        return TaskSet.from_records(self._listing()["tasks"])

    def episode_tools(self) -> Mapping[str, ToolSpec]:
        return {
            tool["name"]: server_tool(mcp_types.Tool(
                name=tool["name"], description=tool["description"],
                input_schema=tool["parameters"]))
            for tool in self._listing()["tools"]
        }

    # -- episode -----------------------------------------------------------------------

    async def reset(self, task: Task) -> list[Message]:
        messages = await super().reset(task)
        self._worker = await bridge_loop().run(worker_for(self.key))
        self._episode = uuid.uuid4().hex
        await bridge_loop().run(
            self._worker.request("open", episode=self._episode, task_id=task.id))
        self._transcript = [dict(m) for m in messages]
        return messages

    async def on_assistant_message(self, tool_calls: list[ToolCall], content: str | None) -> None:
        """Record the model's message as it came (malformed calls included: verifiers'
        harness sees those too), as valid UTF-8 so that no answer can fail the scoring."""
        message: Message = {"role": "assistant", "content": valid_text(content or "")}
        if tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": valid_text(call.name),
                              "arguments": _wire_arguments(call.arguments)}}
                for call in tool_calls
            ]
        self._transcript.append(message)

    async def call_server_tool(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run one validated call in this episode's toolsets (the target of every tool)."""
        worker, episode = self._require()
        call_id = self._call_id(tool)
        try:
            result = await bridge_loop().run(
                worker.request("call", episode=episode, tool=tool, arguments=arguments))
        except EnvironmentFailure as exc:  # verifiers failed, not the call: mask
            raise SandboxError(str(exc)) from None
        except WorkerError as exc:
            self._transcript.append(
                {"role": "tool", "tool_call_id": call_id, "content": f"Error: {exc}"})
            raise
        self._transcript.append(
            {"role": "tool", "tool_call_id": call_id, "content": result["content"]})
        return str(result["content"])

    def _call_id(self, tool: str) -> str:
        """The id of the latest call of ``tool`` not answered yet (calls run in order)."""
        answered = {m.get("tool_call_id") for m in self._transcript if m.get("role") == "tool"}
        for message in reversed(self._transcript):
            for call in message.get("tool_calls") or []:
                if call["function"]["name"] == tool and call["id"] not in answered:
                    return str(call["id"])
            if message.get("role") == "assistant":
                break
        return f"call-{len(self._transcript)}"

    async def reward(self) -> Reward:  # type: ignore[override]  # the session awaits it
        worker, episode = self._require()
        scored = await bridge_loop().run(
            worker.request("score", episode=episode, messages=self._transcript))
        return Reward(
            value=float(scored["reward"]),
            components={k: float(v) for k, v in scored["components"].items()},
            info={"weights": scored["weights"], "metrics": scored["metrics"]},
        )

    def _require(self) -> tuple[Worker, str]:
        if self._worker is None or self._episode is None:
            raise EnvironmentFailure("the verifiers environment was used before reset")
        return self._worker, self._episode

    async def close(self) -> None:
        worker, episode = self._worker, self._episode
        self._episode = None
        if worker is not None and episode is not None and worker.alive:
            await bridge_loop().run(worker.request("close", episode=episode))

    @classmethod
    async def aclose_shared(cls) -> None:
        await bridge_loop().run(stop_workers())

"""Policies that need no model: gold-action replay and the do-nothing policy.

``reference`` replays a task's gold actions, one call per turn, then gives the task's
answer as a final message if the episode is still running. A gold action with an empty
name is a final message (its ``content`` argument) in the middle of the replay: it answers
one user turn of an environment with a scripted user, which then asks the next. It
validates environments (``envhub check``), powers demos without a model server, and, with
``wrong_action_p``, produces a known mix of good and bad episodes for testing the harness:
a wrong action is an empty final answer or one of the malformed calls models make (JSON
arguments cut short, a tool that does not exist, arguments of the wrong types), so runs
exercise the sessions' and the viewer's tool-error paths as well.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

from envhub.errors import PolicyError
from envhub.policies.base import Completion, GenerateRequest
from envhub.types import ToolCall

if TYPE_CHECKING:
    from envhub.policies.factory import PolicyConfig

__all__ = ["NoopPolicy", "ReferencePolicy"]


_WRONG_ACTIONS = ("empty_answer", "bad_json", "unknown_tool", "wrong_types")

# A value of another JSON type than the schema's ``type``, which argument validation refuses.
_WRONG_VALUES: dict[str, Any] = {
    "string": ["not", "a", "string"],
    "integer": "not a number",
    "number": "not a number",
    "boolean": "not a boolean",
    "array": "not an array",
    "object": "not an object",
}


class ReferencePolicy:
    """Replays ``task.gold_actions``; with probability ``wrong_action_p`` per turn it plays
    a wrong action instead, drawn from :data:`_WRONG_ACTIONS` (module docstring). Both
    draws are deterministic per ``seed``, task, sample and turn."""

    def __init__(self, *, wrong_action_p: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= wrong_action_p <= 1.0:
            raise PolicyError(f"wrong_action_p must be in [0, 1], got {wrong_action_p}")
        self.model = "reference" if wrong_action_p == 0 else f"reference(wrong_p={wrong_action_p})"
        self.wrong_action_p = wrong_action_p
        self.seed = seed

    @classmethod
    def from_config(cls, config: PolicyConfig) -> ReferencePolicy:
        """The ``reference`` policy's factory (``envhub.policies`` entry point): it needs
        no model; of the options, ``wrong_action_p``."""
        return cls(wrong_action_p=config.wrong_action_p)

    async def generate(self, request: GenerateRequest) -> Completion:
        task = request.task
        if task is None:
            raise PolicyError(
                "the reference policy needs the task's gold actions, which only an in-process "
                "environment provides: drop --env-url or use a model policy"
            )
        if self.wrong_action_p:
            rng = random.Random(
                f"{self.seed}:{request.task_id}:{request.sample_index}:{request.turn}"
            )
            if rng.random() < self.wrong_action_p:
                return _wrong_action(request, rng.choice(_WRONG_ACTIONS))
        if request.turn < len(task.gold_actions):
            gold = task.gold_actions[request.turn]
            if not gold.name:  # a final answer mid-episode: ends a user turn (scripted users)
                content = str(gold.arguments.get("content", ""))
                return Completion(content=content, tool_calls=[], finish_reason="stop")
            call = ToolCall(id=f"ref-{request.turn}", name=gold.name, arguments=gold.arguments)
            return Completion(content=None, tool_calls=[call], finish_reason="tool_calls")
        answer = "" if task.answer is None else str(task.answer)
        return Completion(content=answer, tool_calls=[], finish_reason="stop")

    async def aclose(self) -> None:
        """Holds no resources."""


def _wrong_action(request: GenerateRequest, kind: str) -> Completion:
    """A wrong action of ``kind`` at this turn; a malformed call names the first of the
    episode's tools (an environment without tools gets the empty answer)."""
    if kind == "empty_answer" or not request.tools:
        return Completion(content="", tool_calls=[], finish_reason="stop")
    function = request.tools[0]["function"]
    name = function["name"]
    properties: dict[str, Any] = function.get("parameters", {}).get("properties", {})
    if kind == "bad_json":
        arguments = '{"' + next(iter(properties), "argument") + '": "'
    elif kind == "unknown_tool":
        name, arguments = f"{name}_unknown", "{}"
    else:  # every argument of another type; a tool without typed arguments gets an extra one
        wrong = {
            key: _WRONG_VALUES[prop["type"]]
            for key, prop in properties.items()
            if prop.get("type") in _WRONG_VALUES
        }
        arguments = json.dumps(wrong or {"unexpected_argument": True})
    call = ToolCall(id=f"wrong-{request.turn}", name=name, arguments=arguments)
    return Completion(content=None, tool_calls=[call], finish_reason="tool_calls")


class NoopPolicy:
    """Answers every task with an empty final message: a correct environment scores 0."""

    model = "noop"

    async def generate(self, request: GenerateRequest) -> Completion:
        return Completion(content="", tool_calls=[], finish_reason="stop")

    async def aclose(self) -> None:
        """Holds no resources."""

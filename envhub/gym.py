"""gymnasium adapter: every installed envhub plugin as ``gymnasium.make("envhub/NAME-v0")``.

The ids need no import of this module: with gymnasium 0.26-0.29 envhub's
``gymnasium.envs`` entry point registers them when gymnasium is imported, and with
gymnasium 1.x, which dropped plugin loading, the module-prefixed id
``gymnasium.make("envhub.gym:envhub/calc-v0")`` imports this module, which registers one
id per installed plugin (:mod:`envhub.runtime.gym_registration`).

Spaces are text: the action is a JSON assistant message
``{"role": "assistant"?, "content": str?, "tool_calls": [{"id", "name", "arguments"}]?}``
(tool calls flat or in OpenAI's nested form; a string that is not a JSON object is taken
as a plain-text final answer), and the observation is the JSON list of messages that the
action produced (on ``reset``: the task's first messages). When the environment answers
a final answer with a user turn (:meth:`envhub.Environment.next_user_turn`), the next
user message(s) follow, and ``info["tools"]`` holds the new tool list if it changed
(``reset``'s ``info["tools"]`` is the first). A JSON object of another shape
(a tool call without a name, ``tool_calls`` not a list, unknown keys) is a malformed
action: nothing of it runs, the observation is one error message saying what is wrong,
``info["malformed_action"]`` holds the reason, and the episode goes on (no turn is used,
so wrap the env in gymnasium's ``TimeLimit`` to bound an agent that keeps sending them).
A step's reward is the environment's reward for that turn
(:meth:`envhub.Environment.turn_reward`, 0 without one), plus, on the step that ends the
episode, the episode's reward (so the rewards of an episode sum to its undiscounted
return, docs: Turn-level rewards); ``info["turn_reward"]`` holds the turn's own (``None``
without one). ``terminated``
means the episode ended by itself (terminal tool, final answer, the environment's own
``env:*`` reason); ``truncated`` means a budget cut it (max turns, wall clock).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envhub.clients.connect import connect, make_keywords
from envhub.environment import Environment
from envhub.errors import InvalidRequest
from envhub.model_text import ModelTextError, loads_json
from envhub.protocol import EnvironmentClient
from envhub.runtime.gym_registration import register_envs
from envhub.runtime.sync import SyncSession, run_sync
from envhub.types import ENV_STOP_PREFIX, Observation, StepResult, ToolCall, chat_message

if TYPE_CHECKING:
    from envhub.clients.remote import SessionTransport

__all__ = ["EnvhubGymEnv", "JsonTextSpace", "register_envs"]

_TERMINATED = {"terminal_tool", "final_answer"}  # and the environment's own (env:*)


class JsonTextSpace(spaces.Space[str]):
    """Strings holding a JSON document of one kind (a message or a list of messages).

    gymnasium's ``Text`` space only admits a fixed character set, which no chat message
    respects; this space checks the JSON shape instead.
    """

    def __init__(self, kind: type, sample_fn: Any, seed: int | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)
        self.kind = kind
        self._sample_fn = sample_fn

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return json.dumps(self._sample_fn(self.np_random))

    def contains(self, x: Any) -> bool:
        if not isinstance(x, str):
            return False
        try:
            return isinstance(loads_json(x), self.kind)
        except ModelTextError:
            return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonTextSpace) and other.kind is self.kind

    def __repr__(self) -> str:
        return f"JsonTextSpace({self.kind.__name__})"


class EnvhubGymEnv(gymnasium.Env[str, str]):
    """A ``gymnasium.Env`` over envhub sessions on any transport (:func:`envhub.connect`).

    ``env`` is the environment: a plugin name, ``module:Class``, a class, or a ready
    :class:`~envhub.protocol.EnvironmentClient`. ``where`` says where it is hosted, as
    :func:`envhub.connect` takes it (a server URL, several, ``ray://HOST:PORT``), with the
    server's ``token``, ``transport`` and fleet ``namespace``; without it the episodes run
    in-process. So ``gymnasium.make("envhub/calc-v0", where="http://127.0.0.1:8000")``
    plays calc on that server. ``options`` are the environment's options and, in-process,
    :func:`envhub.make`'s budget keywords (``max_turns=``...). :meth:`close` closes the
    client this adapter connected, never a ready one it was given.
    """

    # "ansi" renders the transcript as text; nothing paces it, but gymnasium's passive
    # checker warns on every render() without a rate, so declare the one its own text
    # environments (FrozenLake, Taxi) use
    metadata = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012 - gymnasium's convention

    def __init__(
        self,
        env: str | type[Environment] | EnvironmentClient,
        render_mode: str | None = None,
        split: str | None = None,
        *,
        where: str | Sequence[str] | None = None,
        token: str | None = None,
        transport: SessionTransport | None = None,
        namespace: str | None = None,
        **options: Any,
    ) -> None:
        self.render_mode = render_mode
        env_options, budgets = make_keywords(options)
        target: str | Sequence[str] | type[Environment] | EnvironmentClient = env
        hosted: str | None = None
        if where is not None:
            if not isinstance(env, str):
                raise InvalidRequest(f"with where=, env names the hosted environment, not {env!r}")
            target, hosted = where, env
        self._client = connect(target, hosted, options=env_options, budgets=budgets, token=token,
                               transport=transport, namespace=namespace)  # fmt: skip
        self._owned = self._client is not env
        self._split = split
        self._task_ids: list[str] | None = None  # the split's, asked once
        self._session = SyncSession(self._client)
        # the tools of these options' episodes (a wrapped MCP server's, not only the class's)
        tool_names = [tool["function"]["name"] for tool in run_sync(self._client.info()).tools]
        self.action_space = JsonTextSpace(dict, lambda rng: _sample_action(rng, tool_names))
        self.observation_space = JsonTextSpace(list, lambda rng: [])
        self._transcript: list[dict[str, Any]] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is None:
            if self._task_ids is None:
                self._task_ids = run_sync(self._client.task_ids(self._split))
            task_id = self._task_ids[int(self.np_random.integers(len(self._task_ids)))]
        start = self._session.reset(task_id)
        self._transcript = list(start.messages)
        return json.dumps(start.messages), {"task_id": start.task_id, "tools": start.tools}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        try:
            parsed = _parse_action(action)
        except _MalformedAction as exc:
            return self._reject(action, str(exc))
        tool_calls = [call.to_openai() for call in parsed.tool_calls]
        result: StepResult = self._session.step(parsed.tool_calls, parsed.content)
        self._transcript.append(
            {"role": "assistant", "content": parsed.content, "tool_calls": tool_calls}
        )
        messages = [chat_message(obs.to_message()) for obs in result.observations]
        messages.extend(result.user_messages)  # a user turn: the episode goes on
        self._transcript.extend(messages)
        info: dict[str, Any] = {
            "stop_reason": result.stop_reason,
            "is_error": [obs.is_error for obs in result.observations],
            "turn_reward": result.turn_reward,
        }
        if result.tools is not None:
            info["tools"] = result.tools
        reward = result.turn_reward or 0.0
        if result.done:
            closed = self._session.close()
            reward += closed.reward
            info.update(components=closed.components, metrics=closed.metrics.model_dump())
        reason = result.stop_reason or ""
        terminated = result.done and (reason in _TERMINATED or reason.startswith(ENV_STOP_PREFIX))
        truncated = result.done and not terminated
        return json.dumps(messages), reward, terminated, truncated, info

    def _reject(self, action: Any, reason: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """A malformed action's step: nothing runs, the agent reads why."""
        error = chat_message(Observation(
            tool_call_id="", content=f"Error: malformed action: {reason}", is_error=True
        ).to_message())  # fmt: skip
        self._transcript.extend([{"role": "assistant", "content": str(action)}, error])
        info = {"stop_reason": None, "is_error": [True], "malformed_action": reason}
        return json.dumps([error]), 0.0, False, False, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(
            f"[{m.get('role')}] {m.get('content') or m.get('tool_calls')}" for m in self._transcript
        )

    def close(self) -> None:
        """Close the open episode, then the client this adapter connected (in-process:
        the environment class's shared resources, ``aclose_shared``: sandbox pools,
        browsers, as ``envhub.make`` users do; remote: its connections)."""
        if not self._session.closed:
            self._session.close()
        if self._owned:
            run_sync(self._client.aclose())


class _MalformedAction(ValueError):
    """An action that is a JSON object but not an assistant message."""


class _Action(BaseModel):
    """The assistant message an action holds."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)


def _parse_action(action: Any) -> _Action:
    if not isinstance(action, str):
        raise _MalformedAction(f"an action is a string, got {type(action).__name__}")
    try:
        message = loads_json(action)
    except ModelTextError:  # not JSON envhub can read (invalid, too deep, too many digits)
        message = None
    if not isinstance(message, dict):
        return _Action(content=action)
    try:
        return _Action.model_validate(message)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'action'}: {error['msg']}"
            for error in exc.errors()[:5]
        )
        raise _MalformedAction(problems[:500]) from None


def _sample_action(rng: np.random.Generator, tool_names: list[str]) -> dict[str, Any]:
    """A random well-formed action: a text answer or a call of a random tool with no args."""
    if not tool_names or rng.random() < 0.5:
        return {"content": f"answer {int(rng.integers(1000))}"}
    name = tool_names[int(rng.integers(len(tool_names)))]
    return {"content": "", "tool_calls": [{"id": "call-0", "name": name, "arguments": "{}"}]}


register_envs()

"""TRL ``GRPOTrainer`` integration: envhub environments as TRL environments, and the
reward function shared with the ``rollout_func`` path (:mod:`envhub.trainers.trl_rollout`).

Two ways in (TRL >= 1.0; both are experimental TRL APIs, checked against TRL 1.16):

``environment_factory`` (TRL generates with the model being trained)::

    factory = environment_factory("calc")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=envhub_reward,
        train_dataset=task_dataset(factory.env, split="train"),
        environment_factory=factory,
        args=GRPOConfig(...),
    )

TRL builds one environment object per rollout and exposes its public methods as tools;
here every method is generated from the envhub tool's JSON schema (typed signature and an
``Args:`` docstring, which TRL renders into the prompt) and forwards the call to an envhub
session on any transport (:class:`~envhub.protocol.SessionHandle`), so budgets, error
observations and truncation are envhub's. :func:`envhub_reward` closes each session and
returns envhub's reward (``None`` for an infra failure, which TRL leaves out of the group
baseline instead of scoring zero).

``rollout_func`` (an inference server such as vLLM generates):
:class:`~envhub.trainers.trl_rollout.EnvhubRollout` runs whole episodes with envhub's
episode runner and hands TRL the token ids the server sampled, with ``env_mask`` = 1
exactly on sampled tokens; ``envhub_reward`` then reads its ``env_reward`` column.

User turns (:meth:`envhub.Environment.next_user_turn`) and changing tools work on the
``rollout_func`` path only. With ``environment_factory`` TRL owns the conversation and
its tool list: the episode ends at the model's first final answer, and a user turn the
environment would answer it with is not delivered (the session closes with
``stop_reason="closed"``).
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import GenericAlias
from typing import Any

from envhub.errors import EnvhubError, InvalidRequest, SessionClosed
from envhub.protocol import EnvironmentClient, SessionHandle
from envhub.runtime.sync import run_sync
from envhub.trainers.environments import (
    abort_quietly,
    resolve_environment,
    start_messages,
    tool_schemas,
)
from envhub.types import Message, ToolCall

__all__ = [
    "EnvhubEnvironmentFactory",
    "EnvhubToolEnvironment",
    "EpisodeRecord",
    "envhub_reward",
    "environment_factory",
    "task_dataset",
]

_RESERVED = {"reset", "get_reward"}
_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
}


# -- environment_factory ---------------------------------------------------------------------


def _annotation(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):  # e.g. ["string", "null"]
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "array":
        return GenericAlias(list, _annotation(schema.get("items") or {}))  # list[item]
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    if "anyOf" in schema:  # pydantic's Optional[X]: anyOf [X, null]
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        if len(options) == 1:
            return _annotation(options[0])
    return str  # unknown shapes reach envhub as given; envhub validates them


def _docstring(description: str, properties: dict[str, Any]) -> str:
    lines = [description.strip() or "A tool.", ""]
    if properties:
        lines.append("Args:")
        for name, schema in properties.items():
            text = " ".join((schema.get("description") or f"The {name} argument.").split())
            if "enum" in schema:
                text += f" (choices: {json.dumps(schema['enum'])})"
            lines.append(f"    {name}: {text}")
    return "\n".join(lines)


def _tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    """A method with the tool's real signature and an ``Args:`` docstring, which TRL (via
    ``transformers.utils.get_json_schema``) turns back into the tool schema it prompts with."""
    function = schema["function"]
    name = function["name"]
    parameters = function.get("parameters") or {}
    properties: dict[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for pname, pschema in properties.items():
        annotation = _annotation(pschema)
        default = inspect.Parameter.empty if pname in required else pschema.get("default")
        if pname not in required and default is None:
            annotation = annotation | None
        annotations[pname] = annotation
        params.append(
            inspect.Parameter(
                pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )

    def method(self: EnvhubToolEnvironment, **arguments: Any) -> str:
        return self._call_tool(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = _docstring(function.get("description") or "", properties)
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    return method


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """One episode an environment object closed: the evidence of where a reward came from."""

    task_id: str
    session_id: str
    reward: float | None
    components: dict[str, float]
    stop_reason: str | None
    error: str | None = None


class EnvhubToolEnvironment:
    """Base of the per-environment classes TRL instantiates (one object per rollout,
    reused across batches through ``reset``). Public methods other than ``reset`` are
    the tools, so everything else here is private."""

    def __init__(self, factory: EnvhubEnvironmentFactory) -> None:
        self._factory = factory
        self._session: SessionHandle | None = None
        self._done = False  # the session's episode has ended
        self._task_id: str | None = None
        self._failure: str | None = None

    def reset(self, **row: Any) -> str | None:
        """Open a session for the row's task; returns text for TRL to append to the prompt
        only when the row's prompt is a placeholder (the session's messages stand in)."""
        self._abandon()
        column = self._factory.task_column
        task_id = row.get(column)
        if task_id is None:
            raise InvalidRequest(
                f"dataset rows need a {column!r} column: build the dataset with "
                "envhub.trainers.trl.task_dataset(...)"
            )
        self._session = run_sync(self._factory.env.open(str(task_id)))
        self._task_id = str(task_id)
        messages = run_sync(start_messages(self._session))
        prompt = row.get("prompt")
        if _is_placeholder(prompt):
            return "\n\n".join(str(m.get("content") or "") for m in messages)
        if not _same_conversation(prompt, messages):
            raise InvalidRequest(
                f"the dataset prompt of task {task_id} differs from the environment's first "
                "messages; build the dataset with envhub.trainers.trl.task_dataset(...)"
            )
        return None

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        session = self._session
        if session is None:
            return "Error: no episode is running (the environment was not reset)"
        if self._failure is not None:
            return f"Error: the environment failed and the episode is void: {self._failure}"
        if self._done:
            return "Error: the episode has ended; no further tool calls are run"
        call = ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)
        try:
            result = run_sync(session.step([call]))
        except SessionClosed:
            self._done = True
            return "Error: the episode has ended; no further tool calls are run"
        except EnvhubError as exc:  # sandbox / transport / environment code: infra, not the model
            self._failure = f"{type(exc).__name__}: {exc}"
            return f"Error: the environment failed: {self._failure}"
        self._done = result.done
        return result.observations[0].content

    def _score(self, completion: Any) -> float | None:
        """Deliver a final answer (an assistant message without tool calls), close the
        session and return envhub's reward; ``None`` when the episode is void."""
        session, self._session = self._session, None
        if session is None:
            return None
        task_id = self._task_id or ""
        try:
            if self._failure is None:
                final = _final_answer(completion)
                if final is not None and not self._done:
                    run_sync(session.step([], content=final))
                closed = run_sync(session.close())
        except EnvhubError as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
        if self._failure is not None:
            run_sync(abort_quietly(session, "TRL episode abort"))
            self._factory.episodes.append(
                EpisodeRecord(task_id, session.session_id, None, {}, "env_error", self._failure)
            )
            self._failure = None
            return None
        self._factory.episodes.append(
            EpisodeRecord(
                task_id, session.session_id, closed.reward, closed.components, closed.stop_reason
            )
        )
        return closed.reward

    def _abandon(self) -> None:
        if self._session is not None:
            run_sync(abort_quietly(self._session, "TRL episode abort"))
        self._session, self._task_id, self._failure = None, None, None
        self._done = False


def _is_placeholder(prompt: Any) -> bool:
    if not prompt:
        return True
    return (
        isinstance(prompt, list)
        and len(prompt) == 1
        and isinstance(prompt[0], dict)
        and not (prompt[0].get("content") or "").strip()
    )


def _same_conversation(prompt: Any, messages: list[Message]) -> bool:
    if not isinstance(prompt, list) or len(prompt) != len(messages):
        return False
    return all(
        p.get("role") == m.get("role") and (p.get("content") or "") == (m.get("content") or "")
        for p, m in zip(prompt, messages, strict=True)
    )


def _final_answer(completion: Any) -> str | None:
    """The text of the completion's last assistant message, if it made no tool call."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return None
    last = completion[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content")
    return content if isinstance(content, str) else None


class EnvhubEnvironmentFactory:
    """What ``GRPOTrainer(environment_factory=...)`` calls: a new environment object per
    call. ``episodes`` records every episode scored (task, session, reward), in order."""

    def __init__(self, env: EnvironmentClient, *, task_column: str = "task_id") -> None:
        self.env = env
        self.task_column = task_column
        self.tools = tool_schemas(env)
        self.episodes: list[EpisodeRecord] = []
        methods: dict[str, Any] = {}
        for schema in self.tools:
            name = schema["function"]["name"]
            if name in _RESERVED or name.startswith("_") or not name.isidentifier():
                raise InvalidRequest(f"tool name {name!r} cannot be a TRL environment method")
            methods[name] = _tool_method(schema)
        class_name = "".join(part.title() for part in str(env.name).split("_")) or "Envhub"
        self.environment_class: type[EnvhubToolEnvironment] = type(
            f"{class_name}Environment", (EnvhubToolEnvironment,), methods
        )

    def __call__(self) -> EnvhubToolEnvironment:
        return self.environment_class(self)

    def rendered_tools(self) -> list[dict[str, Any]]:
        """The tool schemas as TRL renders them into prompts (``get_json_schema`` of the
        generated methods: the same fields as envhub's, in transformers' key order)."""
        from transformers.utils import get_json_schema

        return [
            get_json_schema(getattr(self.environment_class, schema["function"]["name"]))
            for schema in self.tools
        ]

    def close(self) -> None:
        """Close the environment's connections (a remote environment's HTTP pool)."""
        run_sync(self.env.aclose())


def environment_factory(
    env: Any,
    *,
    env_name: str | None = None,
    options: dict[str, Any] | None = None,
    token: str | None = None,
    task_column: str = "task_id",
    **make_kwargs: Any,
) -> EnvhubEnvironmentFactory:
    """An ``environment_factory`` for TRL's ``GRPOTrainer`` over an envhub environment.

    ``env`` is a plugin name (``"calc"``, in-process; ``make_kwargs`` such as
    ``max_turns`` go to :func:`envhub.make`), an ``envhub serve`` URL together with
    ``env_name``, or any :class:`~envhub.protocol.EnvironmentClient`. Pair it with
    ``reward_funcs=envhub_reward`` and a dataset from :func:`task_dataset`.
    """
    resolved = resolve_environment(
        env, env_name=env_name, options=options, token=token, **make_kwargs
    )
    return EnvhubEnvironmentFactory(resolved, task_column=task_column)


def envhub_reward(
    prompts: Sequence[Any] | None = None,
    completions: Sequence[Any] | None = None,
    environments: Sequence[Any] | None = None,
    env_reward: Sequence[float | None] | None = None,
    **_: Any,
) -> list[float | None]:
    """TRL reward function returning envhub's episode rewards.

    With ``environment_factory`` it closes each rollout's session (after delivering a
    final text answer) and returns the environment's reward; with :class:`EnvhubRollout`
    it returns the ``env_reward`` column the rollout produced. ``None`` marks a void
    episode (infra failure): TRL excludes it from the baseline instead of scoring 0.
    """
    if env_reward is not None:
        return list(env_reward)
    if environments is None or completions is None:
        raise InvalidRequest(
            "envhub_reward needs TRL's `environments` (environment_factory) or the "
            "`env_reward` column (EnvhubRollout)"
        )
    return [
        env._score(completion) if isinstance(env, EnvhubToolEnvironment) else None
        for env, completion in zip(environments, completions, strict=True)
    ]


def task_dataset(
    env: EnvironmentClient, split: str | None = "train", *, limit: int | None = None
) -> Any:
    """A ``datasets.Dataset`` with ``prompt`` (the task's messages) and ``task_id`` columns.

    Where the environment's transport does not give whole tasks (a remote one), the
    prompts are not known without opening sessions, so the rows carry a placeholder
    prompt and the environment object's ``reset`` supplies the session's first messages
    as text.
    """
    from datasets import Dataset

    rows = run_sync(_task_rows(env, split, limit))
    if not rows["task_id"]:
        raise InvalidRequest(f"no tasks in split {split!r}")
    return Dataset.from_dict(rows)


async def _task_rows(
    env: EnvironmentClient, split: str | None, limit: int | None
) -> dict[str, list[Any]]:
    ids = (await env.task_ids(split))[:limit]
    try:
        prompts = [list((await env.task(task_id)).prompt) for task_id in ids]
    except NotImplementedError:  # task ids only: each session's reset gives its prompt
        prompts = [[{"role": "user", "content": ""}] for _ in ids]
    return {"prompt": prompts, "task_id": ids}

"""The ``Environment`` contract.

An environment is a class whose ``@tool`` methods the model calls, with ``reset(task)``
returning the first messages, per-episode state on ``self``, and ``reward()`` scoring
the episode. One instance serves exactly one episode; budgets, error observations and
metrics are the session's job (:mod:`envhub.session`), not the environment's.

Options (a data path, a mode, a sandbox backend) are the constructor's keyword
arguments, so ``--env-arg KEY=VALUE`` and HTTP ``options`` reach them unchanged.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from envhub.budgets import Budgets
from envhub.task import Task, TaskSet
from envhub.tools import ToolSpec, collect_tools
from envhub.types import Message, Reward

__all__ = ["Environment"]


class Environment:
    """Base class of every envhub environment.

    Subclasses set ``name``/``version``, implement :meth:`load_tasks` and :meth:`reward`,
    and define tools with :func:`envhub.tool`. Heavy shared resources (databases,
    indexes, browsers) belong in module-level caches keyed by the options, since a new
    instance is created for every episode.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "0.0.0"
    budgets: ClassVar[Budgets] = Budgets()
    #: whether an assistant message without tool calls ends the episode
    final_answer_ends_episode: ClassVar[bool] = True

    task: Task
    final_answer: str | None = None

    def __init__(self, **options: Any) -> None:
        if options:
            raise TypeError(f"unexpected options: {', '.join(sorted(options))}")

    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        """The tools of this class, computed once per class."""
        cached = cls.__dict__.get("_envhub_tool_specs")
        if cached is None:
            cached = collect_tools(cls)
            cls._envhub_tool_specs = cached  # type: ignore[attr-defined]
        return cached

    @classmethod
    def tool_schemas(cls) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list (cached with the specs; callers must not mutate it)."""
        return [spec.schema for spec in cls.tool_specs().values()]

    def load_tasks(self) -> TaskSet:
        """The environment's tasks for the current options (called once per option set)."""
        raise NotImplementedError(f"{type(self).__name__} must implement load_tasks()")

    async def reset(self, task: Task) -> list[Message]:
        """Start an episode on ``task``; returns the messages the model sees first."""
        self.task = task
        return [dict(m) for m in task.prompt]

    async def on_final_answer(self, content: str) -> None:
        """Called with the text of an assistant message that has no tool calls."""
        self.final_answer = content

    def reward(self) -> Reward | float:
        """Score the finished (or abandoned) episode; may also be ``async def``."""
        raise NotImplementedError(f"{type(self).__name__} must implement reward()")

    async def close(self) -> None:
        """Free per-episode resources (sandboxes, browser contexts)."""


def option_names(cls: type[Environment]) -> list[str]:
    """The keyword options an environment class accepts (for ``envhub info``)."""
    params = inspect.signature(cls.__init__).parameters
    return [
        p
        for p, v in params.items()
        if p != "self" and v.kind in (v.KEYWORD_ONLY, v.POSITIONAL_OR_KEYWORD)
    ]

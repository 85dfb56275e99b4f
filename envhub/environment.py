"""The ``Environment`` contract.

An environment is a class whose ``@tool`` methods the model calls, with ``reset(task)``
returning the first messages, per-episode state on ``self``, and ``reward()`` scoring
the episode. One instance serves exactly one episode; budgets, error observations and
metrics are the session's job (:mod:`envhub.runtime.session`), not the environment's.

Options (a data path, a mode, a sandbox backend) are the constructor's keyword
arguments, so the operator's ``--env-arg KEY=VALUE`` reaches them unchanged; a server's
clients may set only the options the class declares in ``client_options``
(:mod:`envhub.runtime.client_options`).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from envhub.budgets import Budgets
from envhub.task import Task, TaskSet
from envhub.tools import ToolSpec, collect_tools
from envhub.types import Message, Reward, ToolCall, env_stop_reason

__all__ = ["Environment", "UserTurn"]


@dataclass(frozen=True)
class UserTurn:
    """What :meth:`Environment.next_user_turn` returns to continue an episode.

    ``messages`` are the next user message(s), at least one: a string becomes
    ``{"role": "user", "content": s}``, a dict is sent as it is. ``tools`` is the *full*
    tool set in force from now on when it changes (``None``: unchanged); a call to a tool
    outside it is an ``is_error`` observation, like an unknown tool.
    """

    messages: list[str | Message]
    tools: Mapping[str, ToolSpec] | None = None

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError("a UserTurn needs at least one message")
        for message in self.messages:
            if not isinstance(message, str | dict):
                raise TypeError(f"a user turn message is a str or a dict, got {message!r}")

    def chat_messages(self) -> list[Message]:
        """The messages in OpenAI chat form."""
        return [
            {"role": "user", "content": m} if isinstance(m, str) else dict(m)
            for m in self.messages
        ]


class Environment:
    """Base class of every envhub environment.

    Subclasses set ``name``/``version``, implement :meth:`reward` and (unless one default
    task will do) :meth:`load_tasks`, and define tools with :func:`envhub.tool`. Heavy
    shared resources (databases, indexes, browsers) belong in module-level caches keyed by
    the options, since a new instance is created for every episode; those that hold
    processes, containers or temp dirs open lazily and close in :meth:`aclose_shared`.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "0.0.0"
    budgets: ClassVar[Budgets] = Budgets()
    #: whether an assistant message without tool calls ends the episode
    final_answer_ends_episode: ClassVar[bool] = True
    #: options an HTTP/WebSocket client may set, name -> type with bounds, e.g.
    #: ``{"num_tasks": Annotated[int, Field(ge=1, le=10_000)]}``; nothing by default.
    #: Never declare what touches the server's machine (sandbox, paths, caches, timeouts).
    client_options: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    #: the user message of the one ``"default"`` task of an environment that does not
    #: override :meth:`load_tasks` (empty: no message; :meth:`reset` writes the prompt)
    default_prompt: ClassVar[str] = ""

    task: Task
    final_answer: str | None = None
    #: ``"env:<reason>"`` once :meth:`end_episode` was called; the session reads it
    requested_stop_reason: str | None = None

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

    def episode_tools(self) -> Mapping[str, ToolSpec]:
        """The tools of this instance's episode: the class's ``@tool`` methods
        (:meth:`tool_specs`), unless the environment learns its tools from elsewhere (an
        MCP server's list) and overrides this.

        The session reads them once :meth:`reset` has returned. Before any reset, the
        answer is the tools an episode with these options would have: listings
        (``info``, ``GET /v1/environments``) ask an unstarted instance, once per
        :class:`~envhub.LocalEnvironment`, in a worker thread, so an override may block.
        """
        return type(self).tool_specs()

    def load_tasks(self) -> TaskSet:
        """The environment's tasks for the current options (called once per option set).

        Without an override the set holds one task, id ``"default"``, whose prompt is
        :attr:`default_prompt`: an environment with no data (a game, a simulator) invents
        each episode in :meth:`reset` instead.
        """
        prompt = [{"role": "user", "content": self.default_prompt}] if self.default_prompt else []
        return TaskSet([Task(id="default", prompt=prompt)])

    def task_counts(self) -> Mapping[str, int] | None:
        """How many tasks of each split :meth:`load_tasks` returns for these options, when
        the environment knows without loading them (a generator's ``num_tasks``); ``None``,
        the default, when only loading tells.

        Listings (``envhub list``) count tasks with it, so that they need not generate
        every plugin's task set. It must agree with :meth:`load_tasks`: once the tasks are
        loaded, :class:`~envhub.LocalEnvironment` compares the two and raises
        :class:`~envhub.errors.EnvironmentFailure` when they differ, so a wrong count
        fails the plugin's own tests instead of misleading a listing.
        """
        return None

    async def reset(self, task: Task) -> list[Message]:
        """Start an episode on ``task``; returns the messages the model sees first."""
        self.task = task
        return [dict(m) for m in task.prompt]

    async def on_assistant_message(self, tool_calls: list[ToolCall], content: str | None) -> None:
        """Called with each assistant message as the model sent it, before its calls run:
        every call as it came, malformed arguments and unknown tool names included (the
        session turns those into error observations; they never reach a tool). An
        environment whose reward judges the model's raw output, as a benchmark's own
        evaluator does, records it here; by default nothing happens."""

    async def on_final_answer(self, content: str) -> None:
        """Called with the text of an assistant message that has no tool calls."""
        self.final_answer = content

    async def next_user_turn(self) -> UserTurn | None:
        """Continue the episode after the model's final answer, or end it (``None``, the
        default).

        Called when a step would end the episode with ``final_answer`` (after
        :meth:`on_final_answer`) or ``terminal_tool``; not after :meth:`end_episode` or a
        budget. A :class:`UserTurn` continues the episode: the step's result carries its
        messages (``StepResult.user_messages``) and, when they change, the new tool
        schemas (``StepResult.tools``). A scripted user returns the next question; an LLM
        user simulator would write it. When the turn or time budget is already spent
        after this step, the episode still ends (``max_turns``/``timeout``) and the turn
        is dropped. Calling :meth:`end_episode` here ends the episode instead. An
        exception is an environment failure (the rollout masks the episode).
        """
        return None

    def end_episode(self, reason: str) -> None:
        """End the episode from the environment's own state (a game over, a goal reached,
        its own step limit): call it in a tool or in :meth:`on_final_answer`.

        The session ends the episode right after that call, with ``stop_reason``
        ``"env:<reason>"`` (taking precedence over ``terminal_tool``/``final_answer`` of
        the same call); later tool calls of the same message are not run, and the episode
        is scored by :meth:`reward` like any other. ``reason`` is a short label: 1-64
        letters, digits, ``_``, ``.`` or ``-``; anything else raises ``ValueError``.
        """
        self.requested_stop_reason = env_stop_reason(reason)

    def turn_reward(self) -> float | None:
        """The reward of the turn that just ran, or ``None`` (the default): no per-turn
        reward. May also be ``async def``.

        The session calls it once per turn (every step: a model call's tool calls, or its
        final answer), after the turn's calls ran and :meth:`on_final_answer`, before
        :meth:`next_user_turn`, so it scores what the assistant just did from the
        environment's own state; the value travels as ``StepResult.turn_reward`` and is
        recorded on the trajectory's turn (:attr:`envhub.trajectory.Turn.reward`). It is
        computed here, never taken from a client. It must be a finite number (an ``int``
        or ``float``, not a ``bool``): anything else, like an exception, is an
        environment failure (the rollout masks the episode). A plain ``def`` runs on the
        session's event loop (it is asked every turn: a worker thread's hop would cost
        more than a cheap score), so one that blocks should be ``async def``.
        :meth:`reward` still scores the whole episode; trainers add it at the last turn
        (docs: Turn-level rewards).
        """
        return None

    def reward(self) -> Reward | float:
        """Score the finished (or abandoned) episode; may also be ``async def``."""
        raise NotImplementedError(f"{type(self).__name__} must implement reward()")

    async def close(self) -> None:
        """Free per-episode resources (sandboxes, browser contexts)."""

    # -- forking ---------------------------------------------------------------------------
    #
    # Two hooks rather than one ``fork()``: the session takes one snapshot for all the
    # children of a fork and restores it into each (so a fork of n costs one snapshot plus
    # n restores), every child is built by the same factory as any episode (the options a
    # server's client chose included), and a snapshot is a value a caller may keep to
    # restore later (a gold prefix replayed once, restarted from many times).

    async def snapshot(self) -> object | None:
        """This episode's state, for :meth:`restore` into a fresh instance: what a fork
        of the session copies natively. ``None`` (the default) says the environment has
        no native snapshot: the session then forks by replaying the episode's tool calls
        in a fresh instance and checks that every observation comes out as recorded
        (:class:`~envhub.errors.NotDeterministic` when one does not).

        Called between turns (the session holds its lock), after :meth:`reset`. The
        value must not share anything mutable with ``self`` (the parent goes on changing),
        nor anything a later :meth:`close` of the parent frees (a connection, a sandbox):
        copy data, and give each child its own resources in :meth:`restore`. An
        environment that knows it cannot be reproduced (a server with side effects)
        raises :class:`~envhub.errors.NotDeterministic` here instead of returning.
        """
        return None

    async def restore(self, state: object) -> None:
        """Become the episode :meth:`snapshot` returned ``state`` for. Called on a fresh
        instance built with the same options and never reset; ``state`` may be restored
        into several instances (the children of one fork), so copy what you keep."""
        raise NotImplementedError(f"{type(self).__name__}.snapshot() returned a state "
                                  "but restore() is not implemented")

    def copied_state(self, *names: str, shared: Sequence[str] = ()) -> dict[str, Any]:
        """A snapshot made of plain data: deep copies of the attributes ``names``, and by
        reference the attributes ``shared`` (data no episode changes: a task, a
        read-only database) and the task; the base class's ``final_answer`` and
        ``requested_stop_reason`` are copied too. Pair it with :meth:`restore_copied`."""
        copied = ("final_answer", "requested_stop_reason", *names)
        return {
            "copied": {name: copy.deepcopy(getattr(self, name)) for name in copied},
            "shared": {name: getattr(self, name) for name in ("task", *shared)},
        }

    def restore_copied(self, state: object) -> None:
        """:meth:`restore` of a :meth:`copied_state`: the copied values are copied again,
        so the children of one fork share nothing mutable."""
        assert isinstance(state, dict), "a state that copied_state() returned"
        for name, value in state["shared"].items():
            setattr(self, name, value)
        for name, value in state["copied"].items():
            setattr(self, name, copy.deepcopy(value))

    @classmethod
    async def aclose_shared(cls) -> None:
        """Release what this class keeps for all its episodes in this process (warm
        sandbox pools, a browser, a site server); by default nothing is kept.

        The lifecycle of such a resource has two sides. It opens lazily, in the first
        :meth:`reset` or tool call that needs it, through a module-level holder (guarded
        by a lock: episodes come from many threads and event loops), so nothing starts
        for an environment that is only listed or inspected. This hook closes it.
        Whoever made the environment calls the hook once no session needs it:
        :meth:`LocalEnvironment.aclose` (also on leaving ``async with envhub.make(...)``),
        ``envhub check`` and ``envhub rollout`` when they finish, and ``envhub serve``
        when it shuts down, after its sessions are closed. Environments register no
        ``atexit`` hooks: a signal-stopped server never runs them, and a script that
        skips the hook leaves only what ``envhub sandbox gc`` reaps.

        Sessions still open on the class lose the resource. Must be safe to call
        repeatedly; a later episode opens the resource again.
        """


def option_names(cls: type[Environment]) -> list[str]:
    """The keyword options an environment class accepts (for ``envhub info``)."""
    params = inspect.signature(cls.__init__).parameters
    return [
        p
        for p, v in params.items()
        if p != "self" and v.kind in (v.KEYWORD_ONLY, v.POSITIONAL_OR_KEYWORD)
    ]

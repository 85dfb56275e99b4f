"""``LocalEnvironment``: an environment class plus options, opening in-process sessions.

It has the same surface as :class:`envhub.client.RemoteEnvironment`, so the rollout
engine, the trainer adapters and the gymnasium adapter work against either.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from envhub.budgets import Budgets
from envhub.environment import Environment
from envhub.errors import InvalidRequest
from envhub.registry import discover, load_environment_class
from envhub.session import Session
from envhub.task import TaskSet

__all__ = ["LocalEnvironment", "make"]

_TASKSETS: OrderedDict[tuple[type[Environment], str], TaskSet] = OrderedDict()
_TASKSETS_LOCK = threading.Lock()
_TASKSETS_KEPT = 64  # option sets whose tasks stay loaded (a server sees client-chosen options)


def _options_key(options: dict[str, Any]) -> str:
    return repr(sorted(options.items()))


class LocalEnvironment:
    """Factory of in-process sessions for one environment and one option set."""

    def __init__(
        self,
        env: str | type[Environment],
        options: dict[str, Any] | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        self.env_class = load_environment_class(env) if isinstance(env, str) else env
        self.options = dict(options or {})
        self.budgets = budgets or self.env_class.budgets
        self.name = self.env_class.name or (env if isinstance(env, str) else env.__name__)
        self._prototype = self._instantiate()  # validates the options once, up front

    @property
    def version(self) -> str:
        spec = discover().get(self.name)
        if self.env_class.version != "0.0.0" or spec is None or spec.version is None:
            return self.env_class.version
        return spec.version

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.env_class.tool_schemas()

    @property
    def tasks(self) -> TaskSet:
        """The task set for these options, loaded once per process and option set."""
        key = (self.env_class, _options_key(self.options))
        with _TASKSETS_LOCK:
            if key in _TASKSETS:
                _TASKSETS.move_to_end(key)
            else:
                _TASKSETS[key] = self._prototype.load_tasks()
                while len(_TASKSETS) > _TASKSETS_KEPT:
                    _TASKSETS.popitem(last=False)
            return _TASKSETS[key]

    def task_ids(self, split: str | None = None) -> list[str]:
        return [t.id for t in self.tasks.split(split)]

    def _instantiate(self) -> Environment:
        try:
            return self.env_class(**self.options)
        except TypeError as exc:
            raise InvalidRequest(f"bad options for {self.name}: {exc}") from exc

    def new_session(
        self,
        task_id: str | None = None,
        *,
        seed: int | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A session that is not started yet (``await session.reset()`` starts it)."""
        task = self.tasks.get(task_id) if task_id is not None else self.tasks.sample(seed)
        return Session(
            self._instantiate(),
            task,
            env_name=self.name,
            budgets=self.budgets,
            session_id=session_id,
        )

    async def open(
        self,
        task_id: str | None = None,
        *,
        seed: int | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create and start a session (the ``POST /v1/sessions`` of the local transport)."""
        session = self.new_session(task_id, seed=seed, session_id=session_id)
        try:
            await session.reset()
        except BaseException:
            await session.abort()
            raise
        return session

    @asynccontextmanager
    async def session(
        self, task_id: str | None = None, *, seed: int | None = None
    ) -> AsyncIterator[Session]:
        """``async with env.session(task_id) as s:`` opens, and closes (scoring) on exit."""
        session = await self.open(task_id, seed=seed)
        try:
            yield session
        finally:
            await session.close()

    async def aclose(self) -> None:
        """Release the environment class's process-wide resources
        (:meth:`Environment.aclose_shared`); call it when no session is open any more."""
        await self.env_class.aclose_shared()


def make(
    env: str | type[Environment],
    *,
    budgets: Budgets | None = None,
    max_turns: int | None = None,
    tool_timeout_s: float | None = None,
    episode_timeout_s: float | None = None,
    max_output_chars: int | None = None,
    **options: Any,
) -> LocalEnvironment:
    """Load an environment by plugin name (or ``module:Class``) with options and budgets.

    Budget keywords override single fields of the environment's default budgets;
    every other keyword is an environment option.
    """
    cls = load_environment_class(env) if isinstance(env, str) else env
    merged = (budgets or cls.budgets).merged(
        max_turns=max_turns,
        tool_timeout_s=tool_timeout_s,
        episode_timeout_s=episode_timeout_s,
        max_output_chars=max_output_chars,
    )
    return LocalEnvironment(cls, options, merged)

"""``LocalEnvironment``: an environment class plus options, opening in-process sessions.

It is the in-process :class:`~envhub.protocol.EnvironmentClient` (as
:class:`envhub.clients.remote.RemoteEnvironment` is the HTTP/WebSocket one), so the rollout
engine, the trainer adapters and the gymnasium adapter work against either.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from envhub._util.sized_lru import SizedLRU, approx_bytes
from envhub.budgets import Budgets
from envhub.environment import Environment
from envhub.errors import EnvhubError, EnvironmentFailure, InvalidRequest
from envhub.protocol import OpeningSession
from envhub.registry import discover_environments, load_environment_class
from envhub.runtime.client_options import client_option_schemas, validate_operator_options
from envhub.runtime.session import Session
from envhub.task import Task, TaskSet
from envhub.types import EnvironmentInfo

__all__ = ["LocalEnvironment", "make"]

_TaskSetKey = tuple[type[Environment], str]

# Task sets shared by every LocalEnvironment of the same class and options, so that
# repeated ``make()`` calls load once; bounded by count and memory because a server also
# loads the option sets its clients choose.
_TASKSETS: SizedLRU[_TaskSetKey, tuple[TaskSet, int]] = SizedLRU(
    max_entries=64, max_bytes=256 * 2**20
)
_TASKSETS_LOCK = threading.Lock()  # guards the two dicts, never held while loading
_LOADING: dict[_TaskSetKey, threading.Lock] = {}  # one load at a time per option set


def _options_key(options: dict[str, Any]) -> str:
    return repr(sorted(options.items()))


def _shared_taskset(key: _TaskSetKey, load: Callable[[], TaskSet]) -> tuple[TaskSet, int]:
    """The cached task set for ``key`` and its size in bytes, loading it on a miss.

    Loads of different option sets run in parallel, so a slow one (a client's large
    variant) never holds up another environment's sessions.
    """
    with _TASKSETS_LOCK:
        cached = _TASKSETS.get(key)
        if cached is not None:
            return cached
        loading = _LOADING.setdefault(key, threading.Lock())
    with loading:
        try:
            with _TASKSETS_LOCK:
                cached = _TASKSETS.get(key)
            if cached is not None:
                return cached
            tasks = load()
            entry = (tasks, approx_bytes(tasks))
            with _TASKSETS_LOCK:
                _TASKSETS.put(key, entry, entry[1])
            return entry
        finally:
            with _TASKSETS_LOCK:
                _LOADING.pop(key, None)


_open_clients: dict[type[Environment], weakref.WeakSet[LocalEnvironment]] = {}
"""The open :class:`LocalEnvironment` clients of each environment class: the class's
shared resources are released when the last of them closes."""


class LocalEnvironment:
    """Factory of in-process sessions for one environment and one option set: the
    in-process :class:`~envhub.protocol.EnvironmentClient`.

    Besides the protocol's coroutines it keeps in-process conveniences: :attr:`tasks`
    (the task set, loaded on first use), :attr:`tools` and :meth:`new_session` (an
    unstarted :class:`~envhub.runtime.session.Session`, for the server's session store).
    """

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
        self._tasks: tuple[TaskSet, int] | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._mark_open()

    @property
    def version(self) -> str:
        spec = discover_environments().get(self.name)
        if self.env_class.version != "0.0.0" or spec is None or spec.version is None:
            return self.env_class.version
        return spec.version

    @functools.cached_property
    def distribution(self) -> tuple[str, str] | None:
        """(name, version) of the installed distribution whose entry point registers this
        environment class; ``None`` for a class no entry point names (``module:Class``,
        a test's class), or one that only shares a plugin's name."""
        spec = discover_environments().get(self.name)
        if spec is None or spec.distribution is None or spec.version is None:
            return None
        try:
            registered = spec.load()  # the plugin's module: imported already when it is ours
        except EnvhubError:
            return None
        return (spec.distribution, spec.version) if registered is self.env_class else None

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool schemas of these options' episodes, asked of the environment once
        (:meth:`Environment.episode_tools` before any reset: it may start a server)."""
        if self._tools is None:
            self._tools = [spec.schema for spec in self._prototype.episode_tools().values()]
        return self._tools

    @property
    def tasks(self) -> TaskSet:
        """The task set for these options: loaded on first use, then held by this object
        (and shared with others of the same options while the process cache keeps it)."""
        return self._loaded_tasks()[0]

    @property
    def tasks_bytes(self) -> int:
        """Estimated memory of :attr:`tasks` (what a cache of environments weighs them by)."""
        return self._loaded_tasks()[1]

    def _loaded_tasks(self) -> tuple[TaskSet, int]:
        if self._tasks is None:
            key = (self.env_class, _options_key(self.options))
            self._tasks = _shared_taskset(key, self._load_tasks)
        return self._tasks

    def _load_tasks(self) -> TaskSet:
        """The prototype's tasks, held to the counts it declares (:meth:`Environment.task_counts`):
        a listing shows those counts without loading, so they must be the truth."""
        tasks = self._prototype.load_tasks()
        declared = self._prototype.task_counts()
        if declared is not None:
            loaded = Counter(task.split for task in tasks)
            if loaded != Counter({split: n for split, n in declared.items() if n}):
                raise EnvironmentFailure(
                    f"{self.name}: task_counts() says {dict(sorted(declared.items()))} but "
                    f"load_tasks() gave {dict(sorted(loaded.items()))}"
                )
        return tasks

    async def _task_set(self) -> TaskSet:
        """:attr:`tasks`, loaded in a worker thread the first time (loading can take
        seconds of CPU, which must not stall the event loop's other sessions)."""
        if self._tasks is None:
            await asyncio.to_thread(self._loaded_tasks)
        return self.tasks

    async def task_ids(self, split: str | None = None) -> list[str]:
        """The ids of a split's tasks in their fixed order (all tasks with ``None``);
        :class:`~envhub.errors.InvalidRequest` for an unknown split."""
        return [t.id for t in (await self._task_set()).split(split)]

    async def task(self, task_id: str) -> Task:
        """The whole task, gold data included (:class:`~envhub.errors.TaskNotFound`)."""
        return (await self._task_set()).get(task_id)

    async def info(self) -> EnvironmentInfo:
        """Name, version, tool schemas, task count, splits, options, budgets and the pins
        (distribution, its version, the task set's hash): what
        ``GET /v1/environments/{env}`` answers for the same environment."""
        tasks = await self._task_set()
        # off the event loop, like the loading: the hash, and the entry-point scan (and
        # plugin import) behind the distribution, which describe() then finds cached
        await asyncio.to_thread(lambda: (tasks.content_hash(), self.distribution))
        if self._tools is None:
            await asyncio.to_thread(lambda: self.tools)
        return self.describe()

    def describe(self) -> EnvironmentInfo:
        """:meth:`info` for blocking callers (``envhub info``, :mod:`envhub.clients.describe`).
        Until the task set is loaded, the counts the environment declares
        (:meth:`Environment.task_counts`) stand for it and ``task_set_hash`` is ``None``;
        without counts it is loaded in this thread."""
        counts = self._prototype.task_counts() if self._tasks is None else None
        if counts is None:
            counts = Counter(task.split for task in self.tasks)
        distribution = self.distribution
        return EnvironmentInfo(
            name=self.name,
            version=self.version,
            tools=self.tools,
            tasks=sum(counts.values()),
            splits=sorted(split for split, n in counts.items() if n),
            options=self.options,
            client_options=client_option_schemas(self.env_class),
            budgets=self.budgets,
            distribution=distribution[0] if distribution else None,
            distribution_version=distribution[1] if distribution else None,
            task_set_hash=self._tasks[0].content_hash() if self._tasks is not None else None,
        )

    def _instantiate(self) -> Environment:
        """The environment built from :attr:`options`. Its own checks speak first (their
        wording is the environment's); when it fails with a bare ``TypeError`` or
        ``ValueError`` (``int('abc')``), the constructor's annotations name the option."""
        try:
            return self.env_class(**self.options)
        except (TypeError, ValueError) as exc:
            validate_operator_options(self.env_class, self.options, env=self.name)
            if isinstance(exc, TypeError):
                raise InvalidRequest(f"bad options for {self.name}: {exc}") from exc
            raise

    def new_session(
        self,
        task_id: str | None = None,
        *,
        seed: int | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A session that is not started yet (``await session.reset()`` starts it)."""
        self._mark_open()  # a client used again after aclose holds the resources again
        task = self.tasks.get(task_id) if task_id is not None else self.tasks.sample(seed)
        return Session(
            self._instantiate(),
            task,
            env_name=self.name,
            budgets=self.budgets,
            new_env=self._instantiate,
            session_id=session_id,
        )

    def open(
        self,
        task_id: str | None = None,
        *,
        session_id: str | None = None,
        seed: int | None = None,
    ) -> OpeningSession:
        """Create and start a session (the ``POST /v1/sessions`` of the local transport);
        ``await`` it, or use it as ``async with`` to close it on exit."""
        return OpeningSession(lambda: self._start(task_id, session_id, seed))

    async def _start(
        self, task_id: str | None, session_id: str | None, seed: int | None
    ) -> Session:
        if self._tasks is None:
            await self._task_set()
        session = self.new_session(task_id, seed=seed, session_id=session_id)
        try:
            await session.reset()
        except BaseException:
            await session.abort()
            raise
        return session

    def _mark_open(self) -> None:
        _open_clients.setdefault(self.env_class, weakref.WeakSet()).add(self)

    async def aclose(self) -> None:
        """Release the environment class's process-wide resources
        (:meth:`Environment.aclose_shared`: sandbox pools, workers, browsers) once no other
        open client of the class is left; call it when no session of this one is open any
        more. Those resources belong to the class, not to a client: two clients of one
        class (gymnasium's ``check_env`` makes a second to close it; a rollout's
        ``--tasks-from``) share them, and closing one must not end the other's episodes.
        A client nobody holds any more does not count, once it is freed: at once (a client
        keeps no reference to itself), or at the next garbage collection should a reference
        cycle hold it (no collection is forced here: a full one costs up to a second in a
        large process, at every close while another client lives)."""
        clients = _open_clients.get(self.env_class)
        if clients is not None:
            clients.discard(self)
            if clients:
                return
        await self.env_class.aclose_shared()

    async def __aenter__(self) -> LocalEnvironment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        """``async with envhub.make(...) as env:`` ends with :meth:`aclose`."""
        await self.aclose()


if TYPE_CHECKING:  # the protocols, checked statically against this implementation
    from envhub.protocol import EnvironmentClient, SessionHandle

    _client: type[EnvironmentClient] = LocalEnvironment
    _session: type[SessionHandle] = Session


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

    ``budgets`` and the budget keywords override the fields they set of the environment's
    default budgets (:meth:`Budgets.over`); every other keyword is an environment option.
    """
    cls = load_environment_class(env) if isinstance(env, str) else env
    merged = (budgets.over(cls.budgets) if budgets else cls.budgets).merged(
        max_turns=max_turns,
        tool_timeout_s=tool_timeout_s,
        episode_timeout_s=episode_timeout_s,
        max_output_chars=max_output_chars,
    )
    return LocalEnvironment(cls, options, merged)

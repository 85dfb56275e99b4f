"""The ``reasoning_gym`` environment: Reasoning Gym's tasks, scored by their own checkers."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field

from envhub import Budgets, Environment, Reward, Task, TaskSet, ToolSpec, tool
from envhub.errors import InvalidRequest
from envhub.rewards import Rubric
from envhub.sandboxes import (
    Sandbox,
    SandboxSpec,
    bwrap_problem,
    make_sandbox,
    resolve_backend,
)
from envhub_reasoning_gym.catalog import check_client_config, parse_config, parse_datasets
from envhub_reasoning_gym.scoring import DEFAULT_MEMORY_BYTES, Outcome, ScorerPool
from envhub_reasoning_gym.screen import UNPARSEABLE, refusal
from envhub_reasoning_gym.tasks import TaskKey, generate, task_set

__all__ = ["ReasoningGymEnv"]

#: the most tasks a client may ask for per dataset (generating them costs server CPU)
MAX_CLIENT_SIZE = 500

_POOLS: dict[tuple[int, bool, int], ScorerPool] = {}
_POOLS_LOCK = threading.Lock()


def _pool(size: int, bwrap: bool, memory_bytes: int) -> ScorerPool:
    with _POOLS_LOCK:
        pool = _POOLS.get((size, bwrap, memory_bytes))
        if pool is None:
            pool = ScorerPool(size, bwrap=bwrap, memory_bytes=memory_bytes)
            _POOLS[(size, bwrap, memory_bytes)] = pool
        return pool


@functools.cache
def _bwrap_works() -> bool:
    """Whether bubblewrap runs here; said once in the log where it does not, because
    then a score runs as the server's user, with the answer screen its only barrier."""
    problem = bwrap_problem()
    if problem is not None:
        logging.getLogger(__name__).warning(
            "Reasoning Gym scores run unconfined (as this server's user, behind the answer "
            "screen and rlimits only): %s; install bubblewrap where answers are untrusted",
            problem,
        )
    return problem is None


def _score_in_bwrap(backend: str) -> bool:
    """Whether scoring runs under bubblewrap: whenever it works on this host, whatever
    the python tool's backend; required (an error where it cannot run) with ``bwrap``."""
    return backend == "bwrap" or _bwrap_works()


def _extract_tagged_answer(text: str) -> str | None:
    from reasoning_gym.utils import extract_answer

    answer: str | None = extract_answer(text)
    return answer


class ReasoningGymEnv(Environment):
    """Every Reasoning Gym dataset as a task set; the reward is the dataset's own
    ``score_answer`` of the submitted answer (a float: partial credit is kept).

    Options: ``datasets`` (comma-separated names or a list; default: every dataset but
    :data:`~envhub_reasoning_gym.catalog.NOT_CHECKABLE`; ``"all"``: every one),
    ``size`` tasks per dataset, ``seed``, ``config`` (``{"dataset": {field: value}}``,
    passed to the dataset's config dataclass). Operator only: ``max_tasks`` (the most
    tasks one option set may generate), ``python`` (offer a ``python`` tool, off by
    default) run in the ``sandbox`` backend (:func:`envhub.sandboxes.resolve_backend`),
    ``python_timeout_s``, ``score_timeout_s``, ``score_workers`` (scoring processes per
    server process) and ``score_memory_mb`` (what one score may allocate). Scoring runs
    under bubblewrap whenever it works on the host (:mod:`.scoring`); ``sandbox=bwrap``
    makes that a requirement.

    The answer is the ``answer`` tool's argument; an episode that ends with a final
    message instead is scored on its ``<answer>...</answer>`` text (Reasoning Gym's own
    format), and one with neither scores 0 without calling ``score_answer``.
    """

    name = "reasoning_gym"
    version = "0.1.0"
    budgets = Budgets(max_turns=8, tool_timeout_s=30.0, episode_timeout_s=300.0)
    rubric = Rubric({"score": 1.0, "answered": 0.0})
    # which tasks and how hard, within bounds; the sandbox, the python tool and the
    # scoring limits touch the server's machine and are the operator's
    client_options: ClassVar[dict[str, Any]] = {
        "datasets": str | list[str],
        "size": Annotated[int, Field(ge=1, le=MAX_CLIENT_SIZE)],
        "seed": Annotated[int, Field(ge=0, lt=2**32)],
        "config": Annotated[dict[str, dict[str, Any]], AfterValidator(check_client_config)],
    }

    def __init__(
        self,
        datasets: str | list[str] | None = None,
        size: int = 10,
        seed: int = 0,
        config: str | Mapping[str, Any] | None = None,
        max_tasks: int = 20_000,
        python: bool = False,
        sandbox: str | None = None,
        python_timeout_s: float = 10.0,
        score_timeout_s: float = 30.0,
        score_workers: int = 4,
        score_memory_mb: int = DEFAULT_MEMORY_BYTES >> 20,
    ) -> None:
        super().__init__()
        names = parse_datasets(datasets)
        counts = (("size", size), ("seed", seed), ("max_tasks", max_tasks))
        for option, value in (*counts, ("score_memory_mb", score_memory_mb)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidRequest(f"{option} must be a non-negative integer, not {value!r}")
        if size < 1:
            raise InvalidRequest("size must be at least 1")
        if len(names) * size > max_tasks:
            raise InvalidRequest(
                f"{len(names)} datasets x size {size} is more than max_tasks={max_tasks}"
            )
        self.datasets = names
        self.size = size
        self.seed = seed
        self.config = parse_config(config, names)
        self.config_json = json.dumps(self.config, sort_keys=True)
        self.offer_python = bool(python)
        self.backend = resolve_backend(sandbox)
        self.python_timeout_s = float(python_timeout_s)
        self.score_timeout_s = float(score_timeout_s)
        self.score_workers = max(1, int(score_workers))
        self.score_memory_bytes = score_memory_mb << 20
        self.entry: dict[str, Any] | None = None
        self.submitted: str | None = None
        self.sandbox: Sandbox | None = None

    @property
    def key(self) -> TaskKey:
        return (tuple(self.datasets), self.seed, self.size, self.config_json, self.offer_python)

    def load_tasks(self) -> TaskSet:
        return task_set(self.key)

    def task_counts(self) -> Mapping[str, int]:
        # entries 0..size-1 of each dataset, all in "train": listings need not generate them
        return {"train": len(self.datasets) * self.size}

    def episode_tools(self) -> Mapping[str, ToolSpec]:
        specs = type(self).tool_specs()
        if self.offer_python:
            return specs
        return {name: spec for name, spec in specs.items() if name != "python"}

    async def reset(self, task: Task) -> list[dict[str, Any]]:
        messages = await super().reset(task)
        generated = await asyncio.to_thread(generate, self.key)
        self.entry = generated.entries[task.metadata["position"]]
        return messages

    @tool(terminal=True)
    async def answer(self, answer: str) -> str:
        """Submit the final answer; this ends the episode.

        Args:
            answer: Only the answer, in the format the question asks for.
        """
        self.submitted = answer
        return "answer recorded"

    @tool
    async def python(self, code: str) -> str:
        """Run a Python 3 program in a fresh interpreter (no network) and see its output.

        Args:
            code: The program; print() what you want to see.
        """
        if self.sandbox is None:
            spec = SandboxSpec(image="python", memory="512MiB", pids=64, workdir="/work")
            self.sandbox = await make_sandbox(spec, self.backend).start()
        result = await self.sandbox.exec(
            ["python3", "-"], timeout=self.python_timeout_s, stdin=code
        )
        output = result.stdout + (result.stderr if result.stderr else "")
        if result.timed_out:
            return f"timed out after {self.python_timeout_s:g}s\n{output}"
        return f"exit code {result.exit_code}\n{output}"

    async def on_final_answer(self, content: str) -> None:
        await super().on_final_answer(content)
        if self.submitted is None and content:
            self.submitted = _extract_tagged_answer(content)

    def score(self, answer: str) -> Outcome:
        """The dataset's ``score_answer`` of ``answer`` for this episode's entry; an answer
        the screen refuses (:func:`~envhub_reasoning_gym.screen.refusal`) is scored as one
        the scorer cannot parse, with the reason as the error."""
        assert self.entry is not None, "reset() must run before scoring"
        dataset = self.task.metadata["dataset"]
        refused = refusal(dataset, self.entry, answer)
        config = {**self.config.get(dataset, {}), "seed": self.seed, "size": self.size}
        pool = _pool(self.score_workers, _score_in_bwrap(self.backend), self.score_memory_bytes)
        outcome = pool.score(
            dataset,
            json.dumps(config, sort_keys=True),
            self.entry,
            UNPARSEABLE if refused else answer,
            self.score_timeout_s,
        )
        return outcome if refused is None else Outcome(outcome.score, refused)

    def reward(self) -> Reward:
        if self.submitted is None or self.entry is None:
            return self.rubric.score({"score": 0.0, "answered": 0.0}, submitted=None)
        outcome = self.score(self.submitted)
        info: dict[str, Any] = {"submitted": self.submitted[:2000]}
        if outcome.error is not None:
            info["score_error"] = outcome.error
        return self.rubric.score({"score": outcome.score or 0.0, "answered": 1.0}, **info)

    async def snapshot(self) -> dict[str, Any] | None:
        """The generated entry and the submitted answer, copied; ``None`` (a fork by
        replay) once the ``python`` tool has started a sandbox, whose files a program may
        have left for the next one."""
        if self.sandbox is not None:
            return None
        return self.copied_state("submitted", shared=("entry",))

    async def restore(self, state: object) -> None:
        self.restore_copied(state)

    async def close(self) -> None:
        if self.sandbox is not None:
            sandbox, self.sandbox = self.sandbox, None
            await sandbox.close()

    @classmethod
    async def aclose_shared(cls) -> None:
        """Stop this process's scoring workers."""
        with _POOLS_LOCK:
            pools = list(_POOLS.values())
            _POOLS.clear()
        for pool in pools:
            await asyncio.to_thread(pool.close)

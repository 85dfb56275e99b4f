"""Environments for the adversarial server tests, hosted by their ``module:Class`` ids.

``MachineEnv`` has the operator options a real environment has (a sandbox backend, a
cache directory it creates, a task file it reads, a timeout) next to one client-settable
option. ``SlowBuildEnv`` loads its tasks slowly when a client asks for it, until a test
releases it. ``QuotingEnv`` has a tool whose error quotes its argument, like a lookup
of a bad id.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field

from envhub import Environment, Task, TaskSet, tool

MACHINE = f"{__name__}:MachineEnv"
SLOW = f"{__name__}:SlowBuildEnv"
QUOTING = f"{__name__}:QuotingEnv"

BUILDING = threading.Event()
"""Set when a slow task-set build has started."""
RELEASE = threading.Event()
"""A slow build waits for this before it returns."""


def _tasks(count: int) -> TaskSet:
    return TaskSet(
        Task(id=f"t-{i}", prompt=[{"role": "user", "content": f"task {i}"}], answer="ok")
        for i in range(count)
    )


class _Echo(Environment):
    budgets = Environment.budgets.merged(max_output_chars=2_000)

    @tool
    async def echo(self, text: str) -> str:
        """Return the text.

        Args:
            text: Anything.
        """
        return text

    def load_tasks(self) -> TaskSet:
        return _tasks(3)

    def reward(self) -> float:
        return 0.0


class MachineEnv(_Echo):
    name = "machine"
    client_options: ClassVar[dict[str, Any]] = {"seed": Annotated[int, Field(ge=0, le=1_000)]}

    def __init__(
        self,
        seed: int = 0,
        sandbox: str = "docker",
        cache_dir: str | None = None,
        tasks: str | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        super().__init__()
        self.sandbox = sandbox
        self.tasks_path = tasks
        if cache_dir is not None:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)

    def load_tasks(self) -> TaskSet:
        if self.tasks_path is None:
            return _tasks(3)
        return TaskSet.from_records(json.loads(line) for line in Path(self.tasks_path).open())

    @tool
    async def backend(self) -> str:
        """The sandbox backend this episode's commands run in."""
        return self.sandbox


class SlowBuildEnv(_Echo):
    name = "slow"
    client_options: ClassVar[dict[str, Any]] = {"slow": bool}

    def __init__(self, slow: bool = False) -> None:
        super().__init__()
        self.slow = slow

    def load_tasks(self) -> TaskSet:
        if self.slow:
            BUILDING.set()
            if not RELEASE.wait(timeout=30.0):
                raise TimeoutError("the test never released the slow build")
        return _tasks(3)


class QuotingEnv(_Echo):
    name = "quoting"

    @tool
    async def lookup(self, key: str) -> str:
        """Look a key up (there are none).

        Args:
            key: The key.
        """
        raise LookupError(f"no entry {key!r}")

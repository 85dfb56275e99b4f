"""A small environment that misbehaves on purpose, hosted by the server tests by its
``module:Class`` id (:data:`ENV_ID`)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated, Any, ClassVar

from pydantic import Field

from envhub import Budgets, Environment, Task, TaskSet, tool

ENV_ID = f"{__name__}:ProbeEnv"

RELEASE = threading.Event()
"""``wait_for_release`` blocks its worker thread until a test sets this."""

CLOSED: list[str] = []
"""Task ids of every instance whose ``close()`` ran (sessions closed, aborted or reaped)."""


class ProbeEnv(Environment):
    name = "probe"
    version = "0.0.1"
    budgets = Budgets(max_turns=50, tool_timeout_s=0.5, episode_timeout_s=60.0)
    client_options: ClassVar[dict[str, Any]] = {"num_tasks": Annotated[int, Field(ge=1, le=100)]}

    def __init__(self, num_tasks: int = 3) -> None:
        super().__init__()
        self.num_tasks = num_tasks
        self.submitted: str | None = None

    def load_tasks(self) -> TaskSet:
        return TaskSet(
            Task(id=f"probe-{i}", prompt=[{"role": "user", "content": f"probe {i}"}], answer="ok")
            for i in range(self.num_tasks)
        )

    @tool
    async def echo(self, text: str) -> str:
        """Return the text.

        Args:
            text: Anything.
        """
        return text

    @tool
    def explode(self) -> str:
        """Always raises."""
        raise RuntimeError("boom")

    @tool
    def block(self, seconds: float) -> str:
        """Sleep in the worker thread (past the 0.5 s timeout when asked to).

        Args:
            seconds: How long to sleep.
        """
        time.sleep(seconds)
        return "slept"

    @tool
    async def nap(self, seconds: float) -> str:
        """Sleep on the event loop.

        Args:
            seconds: How long to sleep.
        """
        await asyncio.sleep(seconds)
        return "napped"

    @tool(timeout=30.0)
    def wait_for_release(self) -> str:
        """Block a worker thread until the test releases it."""
        if not RELEASE.wait(timeout=20.0):
            raise TimeoutError("never released")
        return "released"

    @tool(terminal=True)
    async def finish(self, value: str) -> str:
        """Submit the answer and end the episode.

        Args:
            value: The answer.
        """
        self.submitted = value
        return "done"

    def reward(self) -> float:
        return 1.0 if self.submitted == self.task.answer else 0.0

    async def close(self) -> None:
        CLOSED.append(self.task.id)

"""Small environments that exercise the session's error and budget paths."""

from __future__ import annotations

import asyncio
import time

from envhub import Budgets, Environment, GoldCall, Reward, Task, TaskSet, tool
from envhub.errors import OptionsRequired, SandboxError


class ToyEnv(Environment):
    name = "toy"
    version = "1.2.3"
    budgets = Budgets(max_turns=4, tool_timeout_s=1.0, episode_timeout_s=30, max_output_chars=100)

    def __init__(self, greeting: str = "hello") -> None:
        super().__init__()
        self.greeting = greeting
        self.finished_with: str | None = None

    def load_tasks(self) -> TaskSet:
        return TaskSet(
            Task(
                id=f"toy-{i}",
                prompt=[{"role": "user", "content": f"{self.greeting} {i}"}],
                answer=str(i),
                gold_actions=[GoldCall(name="finish", arguments={"text": str(i)})],
                split="test" if i % 2 else "train",
            )
            for i in range(6)
        )

    @tool
    def add(self, a: int, b: int = 1) -> int:
        """Add two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a + b

    @tool
    def boom(self) -> str:
        """Always raises."""
        raise RuntimeError("kaboom")

    @tool
    def nap(self, seconds: float) -> str:
        """Sleep in a worker thread (blocking code).

        Args:
            seconds: How long to sleep.
        """
        time.sleep(seconds)
        return "rested"

    @tool
    async def wait(self, seconds: float) -> str:
        """Sleep on the event loop.

        Args:
            seconds: How long to sleep.
        """
        await asyncio.sleep(seconds)
        return "waited"

    @tool
    def shout(self, size: int) -> str:
        """Return a long output.

        Args:
            size: Number of characters.
        """
        return "x" * size

    @tool
    def sandbox_dies(self) -> str:
        """Simulates infrastructure failure."""
        raise SandboxError("container vanished")

    @tool(terminal=True)
    def finish(self, text: str) -> str:
        """Submit the answer.

        Args:
            text: The answer.
        """
        self.finished_with = text
        return "ok"

    def reward(self) -> Reward:
        correct = float(self.finished_with == self.task.answer)
        return Reward(value=correct, components={"correct": correct})


class SloppyToolsEnv(Environment):
    """Tools written without type hints or an ``Args:`` docstring, as a first draft often
    is: legal, and ``envhub check``/``envhub info`` must say what the model is not told."""

    name = "sloppy"

    def load_tasks(self) -> TaskSet:
        return TaskSet([
            Task(id="sloppy-0", prompt=[{"role": "user", "content": "peek at a"}], answer="1",
                 gold_actions=[GoldCall(name="peek", arguments={"key": "a"})])
        ])  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.seen: object = None

    @tool(terminal=True)
    def peek(self, key):  # type: ignore[no-untyped-def]  # the gap under test
        self.seen = {"a": "1"}.get(key)
        return str(self.seen)

    @tool
    def note(self, text: str) -> str:
        """Write a note."""
        return text

    def reward(self) -> Reward:
        return Reward(value=float(self.seen == self.task.answer))


class CountedEnv(Environment):
    """Declares its task counts; ``loads`` counts :meth:`load_tasks` calls in this process,
    and the ``wrong`` option makes the declared counts disagree with the loaded tasks."""

    name = "counted"
    version = "0.4.0"
    loads = 0

    def __init__(self, wrong: bool = False) -> None:
        super().__init__()
        self.wrong = wrong

    def load_tasks(self) -> TaskSet:
        type(self).loads += 1
        return TaskSet(
            Task(id=f"counted-{i}", prompt=[], split="test" if i == 2 else "train")
            for i in range(3)
        )

    def task_counts(self) -> dict[str, int]:
        return {"train": 2, "test": 2 if self.wrong else 1}

    @tool
    def finish(self, text: str) -> str:
        """End the episode.

        Args:
            text: The answer.
        """
        return text

    def reward(self) -> float:
        return 0.0


class NeedsServerEnv(ToyEnv):
    """Cannot build without an option only its operator can give (as a bridge needs the
    server it reaches)."""

    name = "needy"

    def __init__(self, server: str | None = None) -> None:
        if server is None:
            raise OptionsRequired("needy needs server= (the server it reaches)")
        super().__init__()

"""Environments that fail on purpose, loaded by ``module:Class`` in the rollout tests."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import ClassVar

from envhub_calc import CalcEnv

from envhub import Reward, tool
from envhub.errors import SandboxError


class SandboxDies(CalcEnv):
    """Every ``calculate`` call loses its sandbox: an infra failure, never the model's."""

    name = "sandbox-dies"

    @tool
    async def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: The expression.
        """
        raise SandboxError("sandbox container exited (injected)")


class FlakyOnce(CalcEnv):
    """The first episode of each task fails at reset; the retry on a fresh session works."""

    name = "flaky-once"
    resets: ClassVar[Counter[str]] = Counter()

    async def reset(self, task):  # type: ignore[no-untyped-def]
        FlakyOnce.resets[task.id] += 1
        if FlakyOnce.resets[task.id] == 1:
            raise SandboxError("could not start sandbox (injected)")
        return await super().reset(task)


class AlwaysOne(CalcEnv):
    """A broken reward: even doing nothing scores 1 (``envhub check`` must catch it)."""

    name = "always-one"

    def reward(self) -> Reward:
        return Reward(value=1.0)


class EvenTasksUnsolvable(CalcEnv):
    """A broken reward on half the tasks: the gold answer scores 0 on even-numbered ones."""

    name = "even-unsolvable"

    def reward(self) -> Reward:
        if int(self.task.id.rsplit("-", 1)[1]) % 2 == 0:
            return Reward(value=0.0)
        return super().reward()


class FailingResets(CalcEnv):
    """``fail_every=n``: the reset of every n-th task (by index) loses its sandbox, so those
    episodes are masked; ``fail_every=1`` is an outage, 0 a healthy environment. Same
    name whatever the option, so a run made during an outage can be resumed without it."""

    name = "failing-resets"

    def __init__(self, fail_every: int = 0, num_tasks: int = 3000, seed: int = 0) -> None:
        super().__init__(num_tasks=num_tasks, seed=seed)
        self.fail_every = int(fail_every)

    async def reset(self, task):  # type: ignore[no-untyped-def]
        if self.fail_every and int(task.id.rsplit("-", 1)[1]) % self.fail_every == 0:
            raise SandboxError("could not start sandbox (injected outage)")
        return await super().reset(task)


class Rendezvous(CalcEnv):
    """``calculate`` answers only once ``party`` calls wait in it at the same time (across
    the sessions of ``room``: one per test), or fails with the tool timeout: proof that
    ``party`` requests reached the server together."""

    name = "rendezvous"
    rooms: ClassVar[dict[str, tuple[list[int], asyncio.Event]]] = {}

    def __init__(
        self, party: int = 1, room: str = "", num_tasks: int = 3000, seed: int = 0
    ) -> None:
        super().__init__(num_tasks=num_tasks, seed=seed)
        self.party, self.room = int(party), room

    @tool
    async def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: The expression.
        """
        count, everyone = Rendezvous.rooms.setdefault(self.room, ([0], asyncio.Event()))
        count[0] += 1
        if count[0] >= self.party:
            everyone.set()
        await everyone.wait()
        return await super().calculate(expression)

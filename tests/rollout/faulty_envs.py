"""Environments that fail on purpose, loaded by ``module:Class`` in the rollout tests."""

from __future__ import annotations

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

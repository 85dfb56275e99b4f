"""A reference policy that can hold every episode in flight at one point, so a test that
kills a replica knows exactly which sessions were open on it at that moment."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from envhub.policies.base import Completion, GenerateRequest
from envhub.policies.reference import ReferencePolicy


class HoldAtSecondTurn:
    """The reference policy; once :attr:`armed`, it holds every episode at its second model
    turn (session open on a replica, one step taken) until :attr:`released` is set.
    :attr:`all_held` is set when ``concurrency`` episodes wait there, which is every
    episode a rollout of that concurrency has in flight."""

    def __init__(self, concurrency: int) -> None:
        self.inner = ReferencePolicy()
        self.model = self.inner.model
        self.concurrency = concurrency
        self.armed = False
        self.finished = 0  # episodes finished so far (counted by the arm_after callback)
        self.held = 0
        self.all_held = asyncio.Event()
        self.released = asyncio.Event()

    def arm_after(self, episodes: int) -> Callable[[object], None]:
        """An ``on_result`` callback that arms the hold once ``episodes`` have finished.
        Episodes past their second turn when it arms finish too, so more than ``episodes``
        can end before the hold: :attr:`finished` says how many."""

        def count(_: object) -> None:
            self.finished += 1
            if self.finished == episodes:
                self.armed = True

        return count

    async def generate(self, request: GenerateRequest) -> Completion:
        if self.armed and request.turn == 1 and not self.released.is_set():
            self.held += 1
            if self.held == self.concurrency:
                self.all_held.set()
            await self.released.wait()
        return await self.inner.generate(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

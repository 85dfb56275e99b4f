"""The generation gate between back-to-back weight updates: a request that one update's
``reopen()`` woke must not start when the next update's ``close()`` came first."""

from __future__ import annotations

import asyncio

from envhub.policies.gate import GenerationGate


async def _yield_to_waiters(times: int = 5) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def test_a_request_woken_by_reopen_waits_for_the_next_update_to_end() -> None:
    gate = GenerationGate()
    gate.close()
    started: list[str] = []

    async def call() -> str:
        started.append("call")
        return "sampled"

    request = asyncio.ensure_future(gate.request(call))
    await _yield_to_waiters()  # the request now waits on the closed gate
    gate.reopen()
    gate.close()  # the next update closes before the woken waiter runs
    await _yield_to_waiters()
    assert started == [] and gate.in_flight == 0
    assert await gate.drained(timeout=0.1)  # what `finish` waits for: nothing in flight

    gate.reopen()
    assert await request == "sampled" and started == ["call"]


async def test_wait_open_and_resume_point_wait_through_back_to_back_updates() -> None:
    gate = GenerationGate()
    gate.close()
    waiting = asyncio.ensure_future(gate.wait_open())
    resuming = asyncio.ensure_future(gate.resume_point())
    await _yield_to_waiters()
    gate.reopen()
    gate.close()
    await _yield_to_waiters()
    assert not waiting.done() and not resuming.done()

    gate.reopen()
    await waiting
    await resuming  # abort-and-resume: the episode goes on
    assert gate.aborted == 1 and gate.dropped == 0

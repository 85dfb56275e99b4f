"""The generation gate: how a weight update reaches the model calls of running episodes.

One :class:`GenerationGate` is shared by a :class:`~envhub.rollout.RolloutStream` (which
closes and reopens it around a weight update) and the policy that makes the model calls
(which passes every request through it). It does three things:

* **Holds new generations.** While the gate is closed no model request starts: a call
  waits in :meth:`GenerationGate.request` until the update is over, then reads the new
  :attr:`~GenerationGate.version`.
* **Knows what is in flight.** Every request runs as its own task, tracked by the gate,
  so the stream can wait for them to finish (:meth:`~GenerationGate.drained`: the
  ``finish`` policy) or cancel them on the client side (:meth:`~GenerationGate.cancel`)
  when the server cannot abort them itself.
* **Tells an aborted request what to do next.** A request the update aborted (the server
  returned its partial completion with ``finish_reason "abort"``, or the gate cancelled
  it) calls :meth:`~GenerationGate.resume_point`: it waits for the update to end, then
  either returns (``abort-and-resume``: the policy continues the partial completion on
  the new weights) or raises :class:`GenerationDropped` (``abort-and-drop``: the stream
  discards the episode, counts it, and runs it again from the start).

A policy supports the gate by implementing :class:`GateAware`; the stream attaches its
gate to such a policy, which passes each request through it and resumes partial
completions. The episode runner passes each whole call of any other policy (litellm,
the reference policy) through the gate instead: an update waits for it or cancels it,
and a cancelled call starts over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

__all__ = [
    "AbortMode",
    "GateAware",
    "GenerationAborted",
    "GenerationDropped",
    "GenerationGate",
    "gated",
]

T = TypeVar("T")
AbortMode = Literal["resume", "drop"]


class GenerationDropped(Exception):
    """The episode's in-flight generation was aborted by an ``abort-and-drop`` weight
    update: the episode must be discarded (and counted), not delivered. A control signal
    between the policy and the stream, never an episode failure."""


class GenerationAborted(Exception):
    """A request the gate cancelled on the client side (the server could not abort it and
    return a partial completion); the policy treats it as an empty partial completion."""


class GenerationGate:
    """Closes model calls during a weight update (see the module docstring).

    ``version`` is called for the client-side weight version (the stream's
    ``policy_version``): the version a request records when its server does not report
    one.
    """

    def __init__(self, version: Callable[[], int | None] = lambda: None) -> None:
        self._version = version
        self._open = asyncio.Event()
        self._open.set()
        self._inflight: set[asyncio.Task[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._abort_mode: AbortMode = "resume"
        self.aborted = 0  # requests an update aborted (server- or client-side), in total
        self.dropped = 0  # of those, the ones whose episode was dropped

    @property
    def version(self) -> int | None:
        return self._version()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    # -- the policy's side -----------------------------------------------------------

    async def wait_open(self) -> None:
        """Return once no weight update is in progress.

        ``Event.wait()`` alone is not enough: a waiter that ``reopen()`` woke still returns
        when the next update's ``close()`` ran before it was scheduled (back-to-back
        updates), and its request would then start under a closed gate, after ``drained()``
        had counted the requests in flight. So the state is checked again on waking; the
        caller starts its request without yielding in between."""
        while not self._open.is_set():
            await self._open.wait()

    async def request(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run one model request: wait while the gate is closed, then run ``call()`` as a
        tracked task. Raises :class:`GenerationAborted` when the gate cancelled it; a
        cancellation of the caller cancels the request too."""
        await self.wait_open()
        task: asyncio.Task[T] = asyncio.ensure_future(call())
        self._inflight.add(task)
        self._idle.clear()
        try:
            await asyncio.wait({task})  # unlike `await task`, tells whose cancellation it is
        except asyncio.CancelledError:  # the caller's (the stream closing): end the request
            task.cancel()
            await asyncio.wait({task})  # unwound before it leaves _inflight (drained())
            raise
        finally:
            self._inflight.discard(task)
            if not self._inflight:
                self._idle.set()
        if task.cancelled():
            raise GenerationAborted("the weight update cancelled this request")
        return task.result()

    async def resume_point(self) -> None:
        """Called by a policy whose request an update aborted: wait for the update to end;
        raise :class:`GenerationDropped` when the update drops partial episodes."""
        self.aborted += 1
        await self.wait_open()
        if self._abort_mode == "drop":
            self.dropped += 1
            raise GenerationDropped("an abort-and-drop weight update discarded this episode")

    # -- the stream's side -----------------------------------------------------------

    def close(self, abort_mode: AbortMode = "resume") -> None:
        """Hold new requests; requests aborted from now on resume or drop per ``abort_mode``."""
        self._abort_mode = abort_mode
        self._open.clear()

    def reopen(self, abort_mode: AbortMode | None = None) -> None:
        """Let requests start again (``abort_mode`` overrides the one given to close: an
        update that failed resumes its aborted requests on the old weights)."""
        if abort_mode is not None:
            self._abort_mode = abort_mode
        self._open.set()

    async def drained(self, timeout: float | None = None) -> bool:
        """Wait until no request is in flight; ``False`` if ``timeout`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def cancel(self) -> int:
        """Cancel the requests in flight on the client side; returns how many."""
        tasks = [t for t in self._inflight if not t.done()]
        for task in tasks:
            task.cancel()
        return len(tasks)


async def gated(gate: GenerationGate | None, call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` through ``gate`` (:meth:`GenerationGate.request`), or directly without one."""
    return await (call() if gate is None else gate.request(call))


@runtime_checkable
class GateAware(Protocol):
    """A policy whose model requests go through a :class:`GenerationGate`."""

    def attach_gate(self, gate: GenerationGate | None) -> None: ...

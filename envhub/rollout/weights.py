"""One weight update of a running stream: the update policies and their sequence.

:meth:`RolloutStream.update_weights <envhub.rollout.RolloutStream.update_weights>` calls
:func:`apply_update`, which closes the stream's generation gate (no new model request
starts until it returns), deals with the requests in flight according to the policy,
has the :class:`~envhub.policies.weight_sync.WeightSync` load the version, and reopens
the gate:

* ``finish``: the requests in flight finish on the old weights (their turns record the
  old version, and the stream's staleness bound covers them as it does any older
  group); the servers are paused once they are idle, then loaded.
* ``abort-and-resume``: the servers abort the requests in flight and return their
  partial completions (or, when the sync cannot abort, the gate cancels them on the
  client side); after the update each continues its partial completion on the new
  weights, and every token records the version that sampled it.
* ``abort-and-drop``: the same abort, but the episodes whose request was aborted are
  discarded and counted (``RolloutStream.episodes_dropped``) and run again from the
  start on the new weights: a group is never delivered with a missing or partial
  episode.

An update that fails (pause, load or resume raised) reopens the gate on the old weights,
lets aborted requests resume there (nothing is dropped for an update that did not
happen), and raises :class:`~envhub.errors.WeightUpdateFailed`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from envhub.errors import InvalidRequest, WeightUpdateFailed
from envhub.policies.gate import GenerationGate
from envhub.policies.weight_sync import WeightSync

__all__ = ["UpdatePolicy", "WeightUpdate", "apply_update"]

UpdatePolicy = Literal["finish", "abort-and-resume", "abort-and-drop"]


@dataclass(frozen=True, slots=True)
class WeightUpdate:
    """What one update did: ``aborted`` requests ended early (whose episodes resumed or,
    under ``abort-and-drop``, were dropped), ``paused_s`` the time no request could
    start, ``drain_s`` the part of it spent waiting for requests to finish or abort."""

    version: int
    policy: UpdatePolicy
    aborted: int
    paused_s: float
    drain_s: float


async def apply_update(
    gate: GenerationGate,
    sync: WeightSync,
    version: int,
    policy: UpdatePolicy,
    *,
    abort_grace_s: float,
    loaded: Callable[[int], None],
) -> WeightUpdate:
    """Run one update through ``gate`` and ``sync`` (see the module docstring);
    ``loaded(version)`` runs once the servers serve ``version``, before the gate reopens
    (the stream sets its ``policy_version`` there). ``abort_grace_s`` is how long aborted
    requests get to return their partial completions before the gate cancels them on the
    client side."""
    if policy not in get_args(UpdatePolicy):
        raise InvalidRequest(
            f"unknown update policy {policy!r}; choose one of {', '.join(get_args(UpdatePolicy))}"
        )
    started = time.perf_counter()
    aborted_before = gate.aborted
    gate.close("drop" if policy == "abort-and-drop" else "resume")
    try:
        if policy == "finish":
            await gate.drained()
            drain_s = time.perf_counter() - started
            await sync.pause(abort=False)
        else:
            if sync.aborts_requests:
                await sync.pause(abort=True)
                if not await gate.drained(abort_grace_s):
                    gate.cancel()
            else:
                gate.cancel()
            await gate.drained()
            drain_s = time.perf_counter() - started
        await sync.load(version)
        await sync.resume()
    except Exception as exc:
        with contextlib.suppress(Exception):
            await sync.resume()
        gate.reopen("resume")
        if isinstance(exc, WeightUpdateFailed):
            raise
        raise WeightUpdateFailed(
            f"weight update to version {version} failed: {type(exc).__name__}: {exc}"
        ) from exc
    except BaseException:  # cancelled: leave the servers and the gate serving
        gate.reopen("resume")
        raise
    loaded(version)
    gate.reopen()
    return WeightUpdate(
        version=version,
        policy=policy,
        aborted=gate.aborted - aborted_before,
        paused_s=time.perf_counter() - started,
        drain_s=drain_s,
    )

"""Garbage-collector settings for long-running envhub processes (the server, rollouts).

CPython's cyclic collector runs a young-generation pass every 700 net allocations and,
every few of those, older passes whose cost grows with every live container object. A
server holding thousands of sessions (messages, pydantic models, sockets) allocates a lot
per step and keeps a lot alive, so the collector became the largest cost per step: with
these settings, ``benchmarks/server_throughput.py --transport ws`` went from 0.21 to 0.12
ms of server CPU per step at C=256 and from 0.37 to 0.14 ms at C=4096 (1.8x and 2.4x the
steps/s). Long-running commands therefore freeze what startup allocated (modules,
registries: never garbage, no need to scan them again) and run the young pass every
``threshold`` allocations instead; cycles are still collected, just in larger batches.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["DEFAULT_GC_THRESHOLD", "gc_tuned_for_throughput"]

DEFAULT_GC_THRESHOLD = 100_000


@contextlib.contextmanager
def gc_tuned_for_throughput(threshold: int = DEFAULT_GC_THRESHOLD) -> Iterator[None]:
    """Inside the block: the objects alive at entry are frozen and the young generation is
    collected every ``threshold`` allocations; Python's settings come back on exit (so a
    command run in-process, e.g. by a test, leaves its host as it found it).
    ``threshold <= 0`` changes nothing."""
    if threshold <= 0:
        yield
        return
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()

"""Caches bounded by memory as well as by count.

A server builds task sets and environment variants for option sets its clients choose, so
a count bound alone lets a few large entries hold gigabytes. :class:`SizedLRU` also
bounds the sum of its entries' sizes, and :func:`approx_bytes` estimates those sizes.
"""

from __future__ import annotations

import gc
import sys
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from types import FunctionType, ModuleType
from typing import Any, Generic, TypeVar

__all__ = ["SizedLRU", "approx_bytes"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_SAMPLE = 200  # items measured when estimating a large collection
_NOT_OWNED = (type, ModuleType, FunctionType)  # shared by everything: never counted


class SizedLRU(Generic[K, V]):
    """Least-recently-used entries, evicted while there are more than ``max_entries`` or
    their sizes add up to more than ``max_bytes``. The newest entry always stays, so an
    entry larger than the whole budget is still usable; it is the first to go.

    Not thread-safe: callers lock, or stay on one event loop.
    """

    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: K, value: V, size: int) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.nbytes -= old[1]
        self._entries[key] = (value, size)
        self.nbytes += size
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_entries or self.nbytes > self.max_bytes
        ):
            _, (_, evicted) = self._entries.popitem(last=False)
            self.nbytes -= evicted


def approx_bytes(items: Iterable[Any]) -> int:
    """Memory held by ``items`` and everything they reference (strings, dicts, models),
    estimated from an evenly spaced sample of at most a few hundred items."""
    values = items if isinstance(items, list) else list(items)
    if not values:
        return sys.getsizeof(values)
    step = max(1, len(values) // _SAMPLE)
    sample = values[::step]
    measured = _deep_size(sample) - sys.getsizeof(sample)
    return sys.getsizeof(values) + measured * len(values) // len(sample)


def _deep_size(root: Any) -> int:
    """``sys.getsizeof`` summed over everything reachable from ``root``, each object once."""
    seen: set[int] = set()
    total = 0
    layer: list[Any] = [root]
    while layer:
        fresh = []
        for obj in layer:
            if id(obj) not in seen and not isinstance(obj, _NOT_OWNED):
                seen.add(id(obj))
                total += sys.getsizeof(obj)
                fresh.append(obj)
        layer = gc.get_referents(*fresh)
    return total

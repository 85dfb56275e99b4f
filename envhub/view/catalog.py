"""The runs one viewer shows: each path given on the command line, its index (opened
lazily, and retried while the file is missing or unreadable, so a run that has not
started writing yet appears once it does) and its statistics (recomputed only when the
index changed).

Indexes are read in chunks of :data:`CHUNK_BYTES`. Opening reads the first one; then
:meth:`Catalog.follow` (a thread of the web app) reads the rest and whatever is appended
later, one chunk at a time so that page queries get the index between chunks. The first
page of a big file comes at once and says how much of the file it covers. Page requests
come first: while one is being answered (:meth:`Catalog.serving`) the follower starts no
new chunk, since parsing takes the interpreter and the index from the request (the first
page of a cold 100,000-line file took 2-3 s beside it). Without a follower, each page
request reads at most one chunk before answering."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from envhub.errors import EnvhubError, InvalidRequest
from envhub.view.index import RunIndex
from envhub.view.stats import RunStats, run_stats

__all__ = ["CHUNK_BYTES", "Catalog", "RunEntry"]

CHUNK_BYTES = 1 << 20
MAX_YIELD_S = 2.0  # the follower waits for page requests at most this long per chunk


@dataclass(eq=False)
class RunEntry:
    number: int
    path: Path
    index: RunIndex | None = None
    error: EnvhubError | None = None
    _stats: dict[bool, tuple[str, RunStats]] = field(default_factory=dict, repr=False)


class Catalog:
    def __init__(
        self, paths: list[Path], cache_dir: Path, *, success_threshold: float = 1.0
    ) -> None:
        self.cache_dir = cache_dir
        self.success_threshold = success_threshold
        self.runs = [RunEntry(i, Path(p)) for i, p in enumerate(paths)]
        self._lock = threading.Lock()
        self._followed = False
        self._requests = 0  # page requests being answered
        self._quiet = threading.Condition()
        for entry in self.runs:
            self._open(entry)

    def _open(self, entry: RunEntry) -> None:
        if entry.index is not None:
            return
        try:
            index = RunIndex(entry.path, self.cache_dir)
            index.refresh(CHUNK_BYTES)
            entry.index, entry.error = index, None
        except EnvhubError as exc:
            entry.error = exc
        except OSError as exc:
            entry.error = InvalidRequest(f"{entry.path}: {exc.strerror}", code="unreadable")

    def entry(self, number: int) -> RunEntry:
        if not 0 <= number < len(self.runs):
            raise InvalidRequest(f"no run {number}: the viewer shows {len(self.runs)}",
                                 code="unknown_run")  # fmt: skip
        entry = self.runs[number]
        with self._lock:
            self._open(entry)
        return entry

    def index(self, number: int, *, refresh: bool = True) -> RunIndex:
        """The run's index; with ``refresh``, after reading (at most one chunk of) what
        was appended since the last look."""
        entry = self.entry(number)
        if entry.index is None:
            assert entry.error is not None
            raise entry.error
        if refresh and not self._followed:
            entry.index.refresh(CHUNK_BYTES)
        return entry.index

    def stats(self, number: int, *, detail: bool = True) -> RunStats:
        """See :func:`~envhub.view.stats.run_stats`; recomputed when the index changed."""
        index = self.index(number, refresh=False)
        entry = self.runs[number]
        version = index.state().version
        cached = entry._stats.get(detail)
        if cached is None or cached[0] != version:  # two requests may both compute it
            stats = run_stats(index, success_threshold=self.success_threshold, detail=detail)
            cached = entry._stats[detail] = (version, stats)
        return cached[1]

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Around a page request: the follower starts no new chunk until it is answered."""
        with self._quiet:
            self._requests += 1
        try:
            yield
        finally:
            with self._quiet:
                self._requests -= 1
                if not self._requests:
                    self._quiet.notify_all()

    def _after_requests(self) -> None:
        """Wait until no page request is being answered (at most :data:`MAX_YIELD_S`, so
        that a page polled without pause cannot stop the reading)."""
        with self._quiet:
            self._quiet.wait_for(lambda: not self._requests, timeout=MAX_YIELD_S)

    def follow(self, stopped: Callable[[], bool], interval_s: float = 0.5) -> None:
        """Until ``stopped()``: read every file to its end, then what is appended to it
        (page requests then leave reading to this loop)."""
        self._followed = True
        try:
            while not stopped():
                busy = False
                for entry in self.runs:
                    try:
                        index = self.index(entry.number, refresh=False)
                        self._after_requests()
                        index.refresh(CHUNK_BYTES)
                    except EnvhubError:
                        continue  # shown on its pages; tried again next round
                    busy = busy or index.state().behind
                if not busy:
                    time.sleep(interval_s)
        finally:
            self._followed = False

    def read_all(self, number: int) -> RunIndex:
        """The run's index with the whole file read (for a report)."""
        index = self.index(number)
        index.refresh()
        return index

    def close(self) -> None:
        for entry in self.runs:
            if entry.index is not None:
                entry.index.close()

"""How ``envhub rollout`` stops on SIGINT (Ctrl-C) or SIGTERM: as at ``--time-limit``.
Imported when a run starts, not when the CLI starts."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["StopOnSignal"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopOnSignal:
    """SIGINT (Ctrl-C) or SIGTERM (Slurm, Kubernetes) during a run: the first one sets the
    run's ``stop`` event, so it ends as at ``--time-limit`` (the episodes in flight are
    cancelled, the file keeps whole lines, the summary is written) and ``received``
    names it; the handlers are then removed, so a second signal stops at once. Off the
    main thread (the CLI invoked from a test's or an application's worker thread) Python
    delivers no signal to the loop, so nothing is installed and only ``stop`` is given."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.stop = asyncio.Event()

    @contextlib.contextmanager
    def installed(self) -> Iterator[asyncio.Event]:
        if threading.current_thread() is not threading.main_thread():
            yield self.stop
            return
        loop = asyncio.get_running_loop()

        def remove() -> None:
            for signum in _STOP_SIGNALS:
                loop.remove_signal_handler(signum)

        def handle(signum: signal.Signals) -> None:
            self.received = signum
            self.stop.set()
            remove()

        for signum in _STOP_SIGNALS:
            loop.add_signal_handler(signum, handle, signum)
        try:
            yield self.stop
        finally:
            remove()

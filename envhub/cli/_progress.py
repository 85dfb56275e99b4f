"""The progress of ``envhub rollout`` and ``envhub check``: a bar laid out to fit any width
on a terminal, plain lines elsewhere (:class:`LiveProgress`).

The title (``calc x Qwen/Qwen2.5-7B-Instruct``) has a line of its own, cut with an ellipsis
when it is wider than the terminal; below it the bar takes whatever width the counts, the
elapsed time and the stats leave. On one line, as rich's default layout has it, an
80-column terminal cut the counts and stats (``3…``, ``0:0…``). Imported when a command
shows progress, not when the CLI starts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text

if TYPE_CHECKING:
    from envhub.rollout.summary import RunSummary
    from envhub.trajectory import Trajectory

__all__ = ["LiveProgress", "make_progress", "progress_line"]


class _TitledProgress(Progress):
    def get_renderables(self) -> Iterable[RenderableType]:
        for task in self.tasks:
            yield Text(task.description, style="bold", no_wrap=True, overflow="ellipsis")
        yield self.make_tasks_table(self.tasks)


def make_progress(console: Console) -> Progress:
    """A bar whose ``stats`` field (set with ``update(task, stats=...)``) follows the counts;
    the numbers never wrap, the bar shrinks instead."""
    whole = Column(no_wrap=True)
    return _TitledProgress(
        BarColumn(bar_width=None),
        MofNCompleteColumn(table_column=whole),
        TimeElapsedColumn(table_column=whole.copy()),
        TextColumn("{task.fields[stats]}", table_column=whole.copy()),
        console=console,
        refresh_per_second=4,
        expand=True,
    )


def progress_line(done: int, total: int | None, masked: int, rate: float | None) -> str:
    """The plain progress line: ``12/40 episodes, 3 masked, 2.1 episodes/s``."""
    per_s = "-" if rate is None else f"{rate:.1f}"
    return f"{done}/{total} episodes, {masked} masked, {per_s} episodes/s"


class LiveProgress:
    """The rollout's progress, counted per finished trajectory: a rich bar on a terminal;
    elsewhere (a Slurm or Kubernetes log, a pipe), where a bar shows nothing until the
    end, a plain :func:`progress_line` every ``interval`` seconds (0: none).

    The rate is :func:`~envhub.rollout.summary.episodes_per_s` on a clock started when
    the run planned its episodes, as the summary's is, and :meth:`finish` shows the
    summary's own count and rate: the progress and the summary cannot disagree."""

    def __init__(self, console: Console, title: str, interval: float) -> None:
        self.console, self.interval = console, interval
        self.total: int | None = None
        self.before = 0  # episodes the output already held (--resume)
        self.done = self.scored = self.masked = 0
        self.reward_sum = 0.0
        self.started = time.perf_counter()
        self.on_terminal = console.is_terminal
        self.bar = make_progress(console)  # started (shown) on a terminal only
        self.bar_task = self.bar.add_task(title, total=None, stats="")
        self.ticker: asyncio.Task[None] | None = None

    def rate(self) -> float | None:
        from envhub.rollout.summary import episodes_per_s

        return episodes_per_s(self.done, time.perf_counter() - self.started)

    def plan(self, total: int, done: int) -> None:
        """The run's ``on_plan``: the tasks are known and the dispatch clock starts."""
        self.total, self.before, self.started = total, done, time.perf_counter()
        if self.on_terminal:
            self.bar.update(self.bar_task, total=total, completed=done)
            self.bar.start()
        elif self.interval > 0:
            self.ticker = asyncio.get_running_loop().create_task(self._tick())

    def record(self, trajectory: Trajectory) -> None:
        """The run's ``on_result``."""
        self.done += 1
        if self.total is not None and self.before + self.done > self.total:
            self.total += 1  # a sampled run drew a group in place of a dropped one
            if self.on_terminal:
                self.bar.update(self.bar_task, total=self.total)
        if trajectory.masked:
            self.masked += 1
        else:
            self.scored += 1
            self.reward_sum += trajectory.reward or 0.0
        if self.on_terminal:
            self.bar.advance(self.bar_task)
            self._show(self.reward_sum / self.scored if self.scored else None, self.rate())

    def finish(self, summary: RunSummary | None) -> None:
        """Stop, showing ``summary``'s count and rate (``None``: the run failed)."""
        if self.ticker is not None:
            self.ticker.cancel()
        if summary is not None and self.on_terminal:
            self._show(summary.mean_reward, summary.episodes_per_s)
        elif summary is not None and self.total is not None:
            self._print(summary.episodes, summary.masked, summary.episodes_per_s)
        self.bar.stop()

    def _show(self, mean: float | None, rate: float | None) -> None:
        stats = "reward " + ("-" if mean is None else f"{mean:.3f}")
        stats += f"  masked {self.masked}  " + ("-" if rate is None else f"{rate:.1f}") + " ep/s"
        self.bar.update(self.bar_task, stats=stats)

    def _print(self, done: int, masked: int, rate: float | None) -> None:
        line = progress_line(done, self.total, masked, rate)
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self._print(self.before + self.done, self.masked, self.rate())

"""The progress bar of ``envhub rollout`` and ``envhub check``, laid out to fit any width.

The title (``calc x Qwen/Qwen2.5-7B-Instruct``) has a line of its own, cut with an ellipsis
when it is wider than the terminal; below it the bar takes whatever width the counts, the
elapsed time and the stats leave. On one line, as rich's default layout has it, an
80-column terminal cut the counts and stats (``3…``, ``0:0…``). Imported when a command
shows progress, not when the CLI starts.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text

__all__ = ["make_progress"]


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

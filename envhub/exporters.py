"""Trajectory exporters that plugins provide: the ``envhub.exporters`` entry points.

A benchmark plugin can write trajectories in its benchmark's own result format (BFCL's
result files, for instance) so that the benchmark's evaluator scores the same episodes
envhub rewarded. ``envhub export --format NAME`` finds the exporter by name; the entry
point is a callable ``(trajectories, output) -> int`` that writes under ``output`` (a file
or a directory, as the format needs) and returns how many trajectories it wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from pathlib import Path

from envhub.errors import InvalidRequest
from envhub.trajectory import Trajectory

__all__ = ["EXPORTER_GROUP", "Exporter", "exporter_names", "load_exporter"]

EXPORTER_GROUP = "envhub.exporters"

Exporter = Callable[[Iterable[Trajectory], Path], int]


def exporter_names() -> list[str]:
    """The export formats installed plugins provide."""
    return sorted({ep.name for ep in entry_points(group=EXPORTER_GROUP)})


def load_exporter(name: str) -> Exporter:
    """The exporter a plugin registered as ``name``; :class:`InvalidRequest` naming the
    installed ones when there is none."""
    for ep in entry_points(group=EXPORTER_GROUP):
        if ep.name == name:
            exporter: Exporter = ep.load()
            return exporter
    known = ", ".join(["parquet", "jsonl", *exporter_names()])
    raise InvalidRequest(f"unknown export format {name!r}; installed formats: {known}")

"""Continuous dispatch: ``concurrency`` workers each pull the next episode as soon as
their last one ends, so a slow episode never holds back the others (no batch barrier).

:func:`run_rollout` is the file-backed run behind ``envhub rollout``: GRPO groups of
``group_size`` samples per task, written one trajectory per line as episodes finish,
with ``resume`` skipping the (task_id, sample_index) pairs the file already holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from envhub.errors import InvalidRequest
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.rollout.summary import RunSummary, summarize
from envhub.trajectory import Trajectory, TrajectoryWriter, read_records

__all__ = ["completed_pairs", "dispatch", "plan_episodes", "run_rollout", "summary_path"]


def group_id(task_id: str, round_index: int) -> str:
    """The GRPO group of a task's ``round_index``-th sampling round."""
    return f"{task_id}#{round_index}"


def plan_episodes(
    task_ids: Iterable[str], group_size: int, *, skip: set[tuple[str, int]] | None = None
) -> list[EpisodeSpec]:
    """Task-major order (a group's samples start together, so groups finish together)."""
    if group_size < 1:
        raise InvalidRequest(f"group size must be >= 1, got {group_size}")
    skip = skip or set()
    return [
        EpisodeSpec(task_id, index, group_id(task_id, 0))
        for task_id in task_ids
        for index in range(group_size)
        if (task_id, index) not in skip
    ]


async def dispatch(
    runner: EpisodeRunner,
    specs: Iterable[EpisodeSpec],
    *,
    concurrency: int,
    on_result: Callable[[Trajectory], None],
    on_start: Callable[[EpisodeSpec], None] | None = None,
) -> int:
    """Run every episode with at most ``concurrency`` in flight; returns how many ran.

    ``on_result`` runs in the event loop for each finished trajectory (write it, count it);
    it must be quick and must not raise.
    """
    if concurrency < 1:
        raise InvalidRequest(f"concurrency must be >= 1, got {concurrency}")
    pending = iter(specs)
    done = 0

    async def worker() -> None:
        nonlocal done
        for spec in pending:  # one shared iterator: each worker takes the next spec
            if on_start is not None:
                on_start(spec)
            trajectory = await runner.run(spec)
            on_result(trajectory)
            done += 1

    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*workers)
    finally:  # a failing callback or a cancelled run stops every worker, not just one
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return done


def completed_pairs(path: str | Path, env_name: str) -> set[tuple[str, int]]:
    """(task_id, sample_index) pairs already in a trajectory file (for ``--resume``)."""
    pairs: set[tuple[str, int]] = set()
    for record in read_records(path):
        name = (record.get("env") or {}).get("name")
        if name != env_name:
            raise InvalidRequest(f"{path} holds trajectories of {name!r}, not {env_name!r}")
        pairs.add((record["task_id"], record["sample_index"]))
    return pairs


def summary_path(output: str | Path) -> Path:
    return Path(f"{output}.summary.json")


async def run_rollout(
    runner: EpisodeRunner,
    task_ids: list[str],
    output: str | Path,
    *,
    group_size: int = 1,
    concurrency: int = 64,
    resume: bool = False,
    success_threshold: float = 1.0,
    on_result: Callable[[Trajectory], None] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """Roll out ``group_size`` samples of each task into ``output`` and summarize the file.

    Without ``resume`` an existing non-empty output is refused (nothing is overwritten).
    ``on_plan(total, already_done)`` is called once before dispatching. The summary covers
    the whole file and is also written to ``OUTPUT.summary.json``.
    """
    output = Path(output)
    exists = output.exists() and output.stat().st_size > 0
    if exists and not resume:
        raise InvalidRequest(f"{output} exists: pass --resume to continue it, or pick another file")
    skip = completed_pairs(output, runner.env_ref.name) if exists else set()
    specs = plan_episodes(task_ids, group_size, skip=skip)
    if on_plan is not None:
        on_plan(len(task_ids) * group_size, len(task_ids) * group_size - len(specs))
    started = time.perf_counter()
    with TrajectoryWriter(output) as writer:

        def record(trajectory: Trajectory) -> None:
            writer.write(trajectory)
            if on_result is not None:
                on_result(trajectory)

        ran = await dispatch(runner, specs, concurrency=concurrency, on_result=record)
    elapsed = time.perf_counter() - started
    wanted = set(task_ids)
    summary = summarize(
        (r for r in read_records(output) if r["task_id"] in wanted),
        success_threshold=success_threshold,
        elapsed_s=elapsed,
        episodes_this_run=ran,
    )
    summary_path(output).write_text(summary.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return summary

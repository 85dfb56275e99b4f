"""Continuous dispatch: ``concurrency`` workers each pull the next episode as soon as
their last one ends, so a slow episode never holds back the others (no batch barrier).

:func:`run_rollout` is the run behind ``envhub rollout`` and :func:`envhub.rollout.run`:
GRPO groups of ``group_size`` samples per task, written one trajectory per line as
episodes finish (or kept in memory without an output file). ``resume`` runs the (task_id,
sample_index) pairs the file does not hold a scored record of: masked records are not
results, so their episodes run again, and the file is compacted at the end to the latest
record of each pair. A ``deadline`` or a ``stop`` event stops the run (episodes in flight
are cancelled and their sessions aborted; ``--resume`` runs them later), and a
:class:`CircuitBreaker` stops it when episodes keep failing. With a ``plan``
(:class:`~envhub.rollout.curriculum.DrawnPlan`), a sampler draws the groups as workers
free up instead, and ``resume`` continues its saved state (``OUTPUT.sampler.json``); a
plan's groups drawn to start from a gold prefix run through a
:class:`~envhub.rollout.gold.GoldPrefixRunner`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from envhub.errors import InvalidRequest
from envhub.rewards.judge import GroupRanker
from envhub.rollout.breaker import CircuitBreaker
from envhub.rollout.curriculum import DrawnPlan, sampler_path
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.rollout.gold import GoldPrefixRunner
from envhub.rollout.groups import GroupScoredRunner, GroupScoring
from envhub.rollout.pins import check_resume
from envhub.rollout.summary import RunSummary, summarize
from envhub.rollout.tree import TreeRunner
from envhub.trajectory import (
    EnvRef,
    Trajectory,
    TrajectoryWriter,
    compact_trajectories,
    read_records,
)

__all__ = [
    "Runs",
    "completed_pairs",
    "dispatch",
    "episodes_of",
    "plan_episodes",
    "run_rollout",
    "summary_path",
]

R = TypeVar("R", bound="Trajectory | Sequence[Trajectory]")
R_co = TypeVar("R_co", covariant=True)


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


class Runs(Protocol[R_co]):
    """What :func:`dispatch` runs specs with: an :class:`EpisodeRunner` (one trajectory
    per spec) or a :class:`~envhub.rollout.tree.TreeRunner` (a tree's per spec)."""

    async def run(self, spec: EpisodeSpec) -> R_co: ...


def episodes_of(result: Trajectory | Sequence[Trajectory]) -> Sequence[Trajectory]:
    """The trajectories of a runner's result (one episode, or a tree's)."""
    return [result] if isinstance(result, Trajectory) else result


async def dispatch(
    runner: Runs[R],
    specs: Iterable[EpisodeSpec],
    *,
    concurrency: int,
    on_result: Callable[[R], None],
    on_start: Callable[[EpisodeSpec], None] | None = None,
    deadline: float | None = None,
    breaker: CircuitBreaker | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Run every spec with at most ``concurrency`` in flight (episodes, or trees with a
    tree runner); returns how many ran.

    ``on_result`` runs in the event loop for each finished result (write it, count it);
    it must be quick and must not raise. At ``deadline`` (a ``time.monotonic()`` value),
    or once ``stop`` is set (``envhub rollout`` sets it on SIGINT or SIGTERM), the
    episodes in flight are cancelled, which aborts their sessions, and none is recorded.
    Once ``breaker`` opens no new episode starts; those in flight finish.
    """
    if concurrency < 1:
        raise InvalidRequest(f"concurrency must be >= 1, got {concurrency}")
    pending = iter(specs)
    done = 0

    async def worker() -> None:
        nonlocal done
        while breaker is None or not breaker.open:
            spec = next(pending, None)  # one shared iterator: each worker takes the next spec
            if spec is None:
                return
            if on_start is not None:
                on_start(spec)
            result = await runner.run(spec)
            if breaker is not None:
                for trajectory in episodes_of(result):
                    breaker.record(trajectory)
            on_result(result)
            done += 1

    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    all_done = asyncio.gather(*workers)  # done when every worker is, or at the first error
    waited: list[asyncio.Future[Any]] = [all_done]
    if stop is not None:
        waited.append(asyncio.ensure_future(stop.wait()))
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        await asyncio.wait(waited, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if all_done.done():
            all_done.result()  # a failing callback stops the run with its error
    finally:  # a failure, the deadline, a stop or a cancelled run stops every worker
        for future in (*workers, *waited[1:]):
            future.cancel()
        await asyncio.gather(*workers, *waited, return_exceptions=True)  # retrieves all_done's
    return done


def completed_pairs(
    path: str | Path, env: EnvRef, *, trees: bool = False
) -> set[tuple[str, int]]:
    """(task_id, sample_index) pairs whose latest record in a trajectory file is scored:
    the ones ``--resume`` skips (a masked record is not a result, so its episode runs
    again). With ``trees``, the (task_id, 0) pairs of the tasks whose latest complete
    tree has no masked episode (a tree is the unit that runs again). A file of another
    environment, or written from another task set than ``env``'s, or by the other kind
    of run (trees or not), is refused (:func:`envhub.rollout.pins.check_resume`)."""
    masked: dict[tuple[str, int], bool] = {}
    tree_masked: dict[str, bool] = {}
    hashes: set[str | None] = set()
    versions: set[tuple[str, str]] = set()
    for record in read_records(path):
        ref = record.get("env") or {}
        if ref.get("name") != env.name:
            raise InvalidRequest(
                f"{path} holds trajectories of {ref.get('name')!r}, not {env.name!r}"
            )
        written = ref.get("task_set_hash")  # any JSON in a damaged file: never equal
        hashes.add(None if written is None else str(written))
        if ref.get("distribution") and ref.get("distribution_version"):
            versions.add((str(ref["distribution"]), str(ref["distribution_version"])))
        tree_id = record.get("tree_id")
        if (tree_id is not None) != trees:
            kind = "a tree rollout" if tree_id is not None else "a rollout without --tree"
            raise InvalidRequest(f"{path} was written by {kind}: resume it the same way")
        if tree_id is None:
            masked[(record["task_id"], record["sample_index"])] = bool(record.get("masked"))
            continue
        tree_masked[tree_id] = tree_masked.get(tree_id, False) or bool(record.get("masked"))
        masked[(record["task_id"], 0)] = tree_masked[tree_id]  # the latest tree counts
    check_resume(path, env, hashes, versions)
    return {pair for pair, was_masked in masked.items() if not was_masked}


def summary_path(output: str | Path) -> Path:
    return Path(f"{output}.summary.json")


async def run_rollout(
    runner: EpisodeRunner,
    task_ids: list[str],
    output: str | Path | None = None,
    *,
    group_size: int = 1,
    concurrency: int = 64,
    resume: bool = False,
    success_threshold: float = 1.0,
    deadline: float | None = None,
    breaker: CircuitBreaker | None = None,
    stop: asyncio.Event | None = None,
    on_result: Callable[[Trajectory], None] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
    plan: DrawnPlan | None = None,
    trees: TreeRunner | None = None,
    group_judge: GroupRanker | GroupScoring | None = None,
) -> RunSummary:
    """Roll out ``group_size`` samples of each task and summarize them (with ``trees``,
    a tree runner over ``runner``: one tree per task, the group of its episodes, each
    tree written whole and resumed whole, see :mod:`envhub.rollout.tree`).

    With ``output``, trajectories are appended to it as they finish and the summary
    covers the whole file (the latest record of each pair of the selected tasks) and is
    also written to ``OUTPUT.summary.json``; without ``resume`` an existing non-empty
    output is refused (nothing is overwritten). Without ``output`` nothing is written:
    the summary covers this run, and ``on_result`` is the way to keep the trajectories.
    ``on_plan(total, already_done)`` is called once before dispatching, right before
    the clock of the summary's ``episodes_per_s`` starts. ``deadline``, ``breaker`` and
    ``stop``: see :func:`dispatch`. The summary's ``env`` is the runner's environment and
    pins (:attr:`EpisodeRunner.env_ref`); ``resume`` checks them against the file's
    (:func:`completed_pairs`). ``plan``: the groups are drawn by its sampler (of the
    same ``group_size``; ``task_ids`` then only selects the summary's records), its
    state saved beside ``output`` and continued by ``resume``; a file written with a
    plan resumes only with one.
    """
    if output is None:
        if resume:
            raise InvalidRequest("resume needs an output file to continue")
        kept: list[Trajectory] = []
        ran, elapsed = await _run_planned(
            runner, task_ids, set(), kept.extend, group_size=group_size,
            concurrency=concurrency, deadline=deadline, breaker=breaker, stop=stop,
            on_result=on_result, on_plan=on_plan, plan=plan, trees=trees,
            group_judge=group_judge,
        )  # fmt: skip
        kept_pairs = {(t.task_id, t.sample_index) for t in kept}
        summary = summarize(
            kept, success_threshold=success_threshold, elapsed_s=elapsed, episodes_this_run=ran,
            max_k=None if plan is None else group_size,
        )  # fmt: skip
        summary = summary.model_copy(update={"env": runner.env_ref})
        return _with_plan(summary, kept_pairs, task_ids, group_size, breaker, deadline, stop,
                          plan)  # fmt: skip
    output = Path(output)
    exists = output.exists() and output.stat().st_size > 0
    if exists and not resume:
        raise InvalidRequest(f"{output} exists: pass --resume to continue it, or pick another file")
    saved = sampler_path(output)
    if exists and plan is None and saved.exists():
        raise InvalidRequest(
            f"{output} was written by a sampled run ({saved.name}): resume it with the "
            "same --sampler, --groups and --drop-uniform-groups"
        )
    env = await runner.resolve_env_ref()
    with TrajectoryWriter(output) as writer:  # opened first: it repairs the file's end
        skip = completed_pairs(output, env, trees=trees is not None) if exists else set()
        if plan is not None:
            plan.state_path = saved
            if exists:
                plan.resume(output)
        ran, elapsed = await _run_planned(
            runner, task_ids, skip, writer.write_tree, group_size=group_size,
            concurrency=concurrency, deadline=deadline, breaker=breaker, stop=stop,
            on_result=on_result, on_plan=on_plan, plan=plan, trees=trees,
            group_judge=group_judge,
        )  # fmt: skip
    compact_trajectories(output)  # from here on, one record per pair: the latest
    wanted = set(task_ids) if plan is None else set(plan.rounds)
    pairs: set[tuple[str, int]] = set()

    def selected() -> Iterator[dict[str, Any]]:  # streamed: records can be large
        for record in read_records(output):
            if record["task_id"] in wanted:
                pairs.add((record["task_id"], record["sample_index"]))
                yield record

    summary = summarize(
        selected(), success_threshold=success_threshold, elapsed_s=elapsed,
        episodes_this_run=ran, max_k=None if plan is None else group_size,
    )  # fmt: skip
    summary = _with_plan(summary, pairs, task_ids, group_size, breaker, deadline, stop, plan)
    summary = summary.model_copy(update={"env": env})
    summary_path(output).write_text(summary.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return summary


async def _run_planned(
    runner: EpisodeRunner,
    task_ids: list[str],
    skip: set[tuple[str, int]],
    record: Callable[[Sequence[Trajectory]], None],
    *,
    group_size: int,
    concurrency: int,
    deadline: float | None,
    breaker: CircuitBreaker | None,
    stop: asyncio.Event | None,
    on_result: Callable[[Trajectory], None] | None,
    on_plan: Callable[[int, int], None] | None,
    plan: DrawnPlan | None = None,
    trees: TreeRunner | None = None,
    group_judge: GroupRanker | GroupScoring | None = None,
) -> tuple[int, float]:
    """Dispatch the episodes not in ``skip`` (with a ``plan``: the ones it draws, in
    rounds while dropped groups leave room for more; with ``trees``: a tree per spec),
    ``record`` getting each episode (or each tree) whole; (how many episodes ran,
    seconds it took)."""
    if plan is None:
        specs = plan_episodes(task_ids, group_size, skip=skip)
        if on_plan is not None:  # a tree's episodes: at most its leaf bound
            per = 1 if trees is None else trees.config.leaf_bound
            total = len(task_ids) * group_size
            on_plan(total * per, (total - len(specs)) * per)
    else:
        specs = []  # drawn in the loop below
        done = len(skip & plan.planned_pairs())
        if on_plan is not None:
            on_plan(max(done, plan.expected_episodes()), done)

    ran = 0

    def recorded(result: Trajectory | Sequence[Trajectory]) -> None:
        nonlocal ran
        episodes = episodes_of(result)
        record(episodes)
        ran += len(episodes)
        for trajectory in episodes:
            if plan is not None:
                plan.record(trajectory)
            if on_result is not None:
                on_result(trajectory)

    gold = None if plan is None or plan.restarts is None else GoldPrefixRunner(runner)
    runs: Runs[Trajectory | Sequence[Trajectory]] = trees or gold or runner
    if group_judge is not None:
        if plan is not None or trees is not None:
            raise InvalidRequest(
                "a group judge ranks the groups of a plain run: drop --tree and the "
                "curriculum options"
            )
        runs = GroupScoredRunner(runner, GroupScoring.of(group_judge), specs)
    started = time.perf_counter()
    try:
        while True:
            ran_now = await dispatch(
                runs, specs if plan is None else plan.specs(), concurrency=concurrency,
                on_result=recorded, deadline=deadline, breaker=breaker, stop=stop,
            )  # fmt: skip
            if plan is None or not ran_now or not plan.wants_more() or _halted(
                breaker, deadline, stop
            ):
                return ran, time.perf_counter() - started
    finally:
        if gold is not None:  # a stopped run's forks that no member took
            await gold.release()


def _halted(
    breaker: CircuitBreaker | None, deadline: float | None, stop: asyncio.Event | None
) -> bool:
    return (
        (breaker is not None and breaker.open)
        or (stop is not None and stop.is_set())
        or (deadline is not None and time.monotonic() >= deadline)
    )


def _with_plan(
    summary: RunSummary,
    pairs: set[tuple[str, int]],
    task_ids: list[str],
    group_size: int,
    breaker: CircuitBreaker | None,
    deadline: float | None,
    stop: asyncio.Event | None,
    plan: DrawnPlan | None = None,
) -> RunSummary:
    """``summary`` plus what was planned, what has no record, and why the run stopped
    (with a ``plan``: its groups drawn and those still to draw, and how many it kept
    and dropped)."""
    if plan is None:
        planned = {(task_id, index) for task_id in task_ids for index in range(group_size)}
        missing = len(planned - pairs)
        total = len(planned)
    else:
        planned = plan.planned_pairs()
        missing = len(planned - pairs) + plan.undrawn() * group_size
        total = len(planned) + plan.undrawn() * group_size
    stopped: str | None
    detail: str | None
    if breaker is not None and breaker.open:
        stopped, detail = "circuit_breaker", breaker.reason
    elif missing and stop is not None and stop.is_set():
        stopped, detail = "interrupted", f"{missing} of {total} episodes did not run"
    elif missing and deadline is not None and time.monotonic() >= deadline:
        stopped, detail = "deadline", f"{missing} of {total} episodes did not run"
    elif plan is not None and plan.exhausted():
        stopped = "max_draws"
        detail = (f"{plan.kept} of {plan.groups} groups kept in {plan.draws} draws "
                  f"({plan.dropped} dropped)")  # fmt: skip
    else:
        stopped = detail = None
    update: dict[str, Any] = {"planned": total, "missing": missing, "stopped": stopped,
                              "stop_detail": detail}  # fmt: skip
    if plan is not None:
        update |= {"groups_kept": plan.kept, "groups_dropped": plan.dropped}
        if plan.restarts is not None:
            update["gold_prefix_episodes"] = summary.gold_prefix_episodes or 0
    return summary.model_copy(update=update)

"""``envhub.rollout.run``: what ``envhub rollout`` does, as one Python call.

    env = envhub.make("calc")                        # or any EnvironmentClient
    policy = make_policy("openai", model="m", base_urls=["http://127.0.0.1:8000/v1"])
    result = await envhub.rollout.run(env, policy, tasks="0:100", group_size=8,
                                      concurrency=256, output="runs/calc.jsonl")
    result = envhub.rollout.run_sync(env, policy, tasks="0:8")   # blocking; kept in memory
    print(result.summary.mean_reward, len(result.trajectories))

It checks the environment's version pin, selects the tasks (a ``--tasks`` spec or a list
of ids), builds the episode runner for the environment (which records its version and
pins, and gives the reference policy its tasks where the transport has them), runs the
episodes with the collector tuned for throughput, and judges the outcome: a run stopped
by its circuit breaker, or with more than ``max_masked_fraction`` of its episodes masked,
raises :class:`~envhub.errors.RolloutFailed` (carrying the result), so a dead server never
passes for a finished run. The caller owns ``env`` and ``policy`` and closes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from envhub._util.gc_tuning import DEFAULT_GC_THRESHOLD, gc_tuned_for_throughput
from envhub.errors import InvalidRequest, RolloutFailed
from envhub.policies.base import Policy
from envhub.protocol import EnvironmentClient
from envhub.rewards.judge import GroupRanker
from envhub.rollout.breaker import DEFAULT_BREAKER_THRESHOLD, CircuitBreaker
from envhub.rollout.compaction import CompactionConfig, check_combination
from envhub.rollout.curriculum import DrawnPlan
from envhub.rollout.dispatcher import run_rollout
from envhub.rollout.episode import EpisodeRunner, TurnLoop
from envhub.rollout.groups import GroupScoring
from envhub.rollout.pins import check_pin
from envhub.rollout.sampling import Gate, GoldRestarts, Sampler, make_sampler
from envhub.rollout.summary import RunSummary
from envhub.rollout.tasks import select_task_ids
from envhub.rollout.tree import TreeConfig, TreeRunner
from envhub.trajectory import EnvRef, Trajectory

if TYPE_CHECKING:
    from envhub.rollout.metrics import RolloutMetrics

__all__ = ["DEFAULT_MAX_MASKED_FRACTION", "RolloutResult", "run", "run_sync"]

DEFAULT_MAX_MASKED_FRACTION = 0.1

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class RolloutResult:
    """What a run produced: its summary, and its trajectories when they were not written
    to ``output`` (read those with :func:`envhub.trajectory.read_trajectories`)."""

    summary: RunSummary
    trajectories: list[Trajectory] | None
    output: Path | None


async def run(
    env: EnvironmentClient,
    policy: Policy,
    tasks: str | Sequence[str] | None = None,
    *,
    pin: str | None = None,
    group_size: int = 1,
    concurrency: int = 64,
    output: str | Path | None = None,
    resume: bool = False,
    time_limit_s: float | None = None,
    stop: asyncio.Event | None = None,
    max_turns: int | None = None,
    max_env_attempts: int = 3,
    policy_version: int | None = None,
    success_threshold: float = 1.0,
    max_masked_fraction: float | None = DEFAULT_MAX_MASKED_FRACTION,
    max_consecutive_masked: int | None = DEFAULT_BREAKER_THRESHOLD,
    gc_threshold: int = DEFAULT_GC_THRESHOLD,
    on_result: Callable[[Trajectory], None] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
    tasks_from: EnvironmentClient | None = None,
    turn_loop: TurnLoop | None = None,
    metrics_port: int | None = None,
    sampler: str | Sampler | None = None,
    sampler_seed: int = 0,
    groups: int | None = None,
    gates: Sequence[Gate] = (),
    max_draws: int | None = None,
    tree: TreeConfig | None = None,
    gold_restart_after: int | None = None,
    gold_prefix: int | Literal["half"] = "half",
    compaction: CompactionConfig | None = None,
    group_judge: GroupRanker | GroupScoring | None = None,
) -> RolloutResult:
    """Roll out ``group_size`` samples of each selected task with ``concurrency`` episodes
    in flight.

    ``tasks``: a ``--tasks`` spec (``"test"``, ``"0:100"``, ``"train[0:100]"``,
    ``"id1,id2"``; default: the test split) or a list of task ids. ``pin``: a version
    specifier (``"==0.2.0"``) that the distribution version ``env`` reports (a server's:
    its own) must satisfy, checked before any episode runs
    (:func:`envhub.rollout.pins.check_pin`). Every trajectory and the summary record the
    environment's pins (:class:`~envhub.trajectory.EnvRef`). ``output``: the JSONL
    file to append to (``resume`` continues one: see :func:`run_rollout`); without it
    the trajectories come back in the result. ``time_limit_s``: after that many seconds
    the episodes in flight are cancelled and the summary says ``stopped="deadline"``
    (``missing`` did not run); setting ``stop`` does the same at once, with
    ``stopped="interrupted"`` (``envhub rollout`` sets it on SIGINT or SIGTERM, so an
    interrupted run still finishes its file and summary). ``max_turns``: this runner's cap
    on model turns, on any transport (the session's own ``max_turns`` budget also
    applies: whichever is lower ends the episode, with ``stop_reason="max_turns"`` either
    way). ``max_consecutive_masked`` masked episodes in a row open the circuit breaker
    (``None``: never). ``gc_threshold``:
    see :func:`envhub._util.gc_tuning.gc_tuned_for_throughput` (0 leaves the collector alone).

    Raises :class:`~envhub.errors.RolloutFailed` when the breaker opened or more than
    ``max_masked_fraction`` of the episodes are masked (``None``: no limit).

    ``tasks_from``: where the policy reads whole tasks when ``env`` publishes none (a
    server, a pool, a fleet): a local copy of the same environment with the same options
    (``envhub.make(name, **options)``), so ``--policy reference`` can replay gold actions
    against remote replicas. The caller owns it too.

    ``turn_loop``: what plays each episode's turns (:class:`~envhub.rollout.episode.TurnLoop`;
    default: the policy loop). ``turn_loop=envhub.agents.AgentLoop(agent)``: an external
    agent framework plays them (``policy`` is then the endpoints its capture proxy
    forwards to).

    ``metrics_port``: serve the run's Prometheus metrics on ``127.0.0.1:PORT/metrics``
    while it runs (:mod:`envhub.rollout.metrics`); the exposition stops when the call
    returns.

    Curricula (:mod:`envhub.rollout.sampling`): with ``sampler`` (``"uniform"``,
    ``"adaptive"`` seeded by ``sampler_seed``, or a :class:`Sampler` over the selected
    tasks), ``groups`` (default: one per task) or ``gates``, the run keeps ``groups``
    groups drawn one at a time by the sampler, each gate able to drop a finished group
    (then another is drawn, ``max_draws`` in all; default four times ``groups``); see
    :mod:`envhub.rollout.curriculum`. Without any of them every selected task gets one
    group, in order, as always. ``gold_restart_after`` (with a curriculum): a task with
    that many scored samples played from scratch, none passed, has every other group
    started from ``gold_prefix`` turns (or ``"half"``) of a replay of its gold actions
    (:class:`~envhub.rollout.sampling.GoldRestarts`, :mod:`envhub.rollout.gold`); it needs
    the tasks' gold actions (an in-process ``env``, or ``tasks_from``) and the policy
    loop.

    ``tree``: tree rollouts (:mod:`envhub.rollout.tree`): each selected task gets one
    tree, its group, ``concurrency`` trees in flight; a tree is written whole and
    ``resume`` runs again every tree with a masked or missing episode. It takes the
    policy loop (no ``turn_loop``), ``group_size`` 1 and no curriculum.

    ``compaction``: compact the context of long episodes
    (``CompactionConfig.of("turns:8", "summarize")``, :mod:`envhub.rollout.compaction`);
    each compaction starts a new segment of the trajectory, trained as its own row. It
    takes the policy loop, and is not combined with ``tree`` or gold restarts in this
    release (an :class:`~envhub.errors.InvalidRequest` before any episode runs).

    ``group_judge``: a group-relative judge (:class:`~envhub.rewards.judge.GroupJudge`)
    ranks each group's members in one request once they have all ended; its scores
    replace their rewards (a :class:`~envhub.rollout.groups.GroupScoring` weighs them
    with the environment's), and a judge failure masks the group's scored members with
    ``judge_error`` (:mod:`envhub.rollout.groups`). Not with a curriculum or ``tree``.
    """
    if max_masked_fraction is not None and not 0.0 <= max_masked_fraction <= 1.0:
        raise InvalidRequest(f"max_masked_fraction must be in [0, 1], not {max_masked_fraction}")
    if tree is not None and (turn_loop is not None or group_size != 1 or sampler is not None
                             or groups is not None or gates):
        raise InvalidRequest(
            "a tree rollout is one tree per task (the tree is the group) played by the "
            "policy loop: drop --group-size, --agent and the curriculum options"
        )
    check_combination(compaction, tree=tree is not None, turn_loop=turn_loop is not None,
                      gold_restarts=gold_restart_after is not None)  # fmt: skip
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    env_ref = EnvRef.of(env.name, await env.info())
    if pin is not None:
        check_pin(env_ref, pin)
    if gold_restart_after is not None and (turn_loop is not None or tree is not None or (
        sampler is None and groups is None and not gates
    )):  # fmt: skip
        raise InvalidRequest(
            "gold restarts are a curriculum's (give --sampler) for the policy loop: drop "
            "--agent and --tree"
        )
    task_ids = await select_task_ids(env, tasks)
    metrics: RolloutMetrics | None = None
    if metrics_port is not None:  # imported here: prometheus_client only when asked for
        from envhub.rollout.metrics import RolloutMetrics

        metrics = RolloutMetrics(metrics_port)
    runner = EpisodeRunner(
        env,
        policy,
        env_ref=env_ref,
        max_turns=max_turns,
        max_env_attempts=max_env_attempts,
        policy_version=lambda: policy_version,
        tasks_from=tasks_from,
        metrics=metrics,
        turn_loop=turn_loop,
        compaction=compaction,
    )
    plan: DrawnPlan | None = None
    if sampler is not None or groups is not None or gates:
        if sampler is None or isinstance(sampler, str):
            sampler = make_sampler(sampler or "uniform", task_ids, seed=sampler_seed,
                                   success_threshold=success_threshold)  # fmt: skip
        restarts = None
        if gold_restart_after is not None:
            restarts = GoldRestarts(gold_restart_after, gold_prefix,
                                    await _gold_actions(runner, task_ids),
                                    success_threshold=success_threshold)  # fmt: skip
        plan = DrawnPlan(sampler, group_size=group_size, groups=groups or len(task_ids),
                         gates=gates, max_draws=max_draws, restarts=restarts)  # fmt: skip
    kept: list[Trajectory] | None = [] if output is None else None

    def record(trajectory: Trajectory) -> None:
        if kept is not None:
            kept.append(trajectory)
        if on_result is not None:
            on_result(trajectory)

    def planned(total: int, done: int) -> None:
        if metrics is not None:
            metrics.episodes_queued(total - done)
        if on_plan is not None:
            on_plan(total, done)

    served = contextlib.nullcontext() if metrics is None else metrics.serving(policy)
    with gc_tuned_for_throughput(gc_threshold), served:
        summary = await run_rollout(
            runner,
            task_ids,
            output,
            group_size=group_size,
            concurrency=concurrency,
            resume=resume,
            success_threshold=success_threshold,
            deadline=deadline,
            breaker=CircuitBreaker(max_consecutive_masked) if max_consecutive_masked else None,
            stop=stop,
            on_result=record,
            on_plan=planned,
            plan=plan,
            trees=None if tree is None else TreeRunner(runner, tree),
            group_judge=group_judge,
        )
    result = RolloutResult(summary, kept, None if output is None else Path(output))
    failure = _failure(summary, max_masked_fraction)
    if failure is not None:
        raise RolloutFailed(failure, result=result)
    return result


async def _gold_actions(runner: EpisodeRunner, task_ids: Sequence[str]) -> dict[str, int]:
    """How many gold actions each task has, for :class:`GoldRestarts`."""
    counts = {}
    for task_id in task_ids:
        task = await runner.task(task_id)
        if task is None:
            raise InvalidRequest(
                "gold restarts replay the tasks' gold actions, which this environment's "
                "transport does not publish: pass tasks_from (a local copy of it)"
            )
        counts[task_id] = len(task.gold_actions)
    return counts


def _blocking(function: Callable[P, Coroutine[Any, Any, T]], name: str, doc: str
              ) -> Callable[P, T]:
    """The blocking twin of a coroutine function, run on envhub's background loop."""

    @functools.wraps(function)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> T:
        from envhub.runtime.sync import run_sync as on_background_loop

        return on_background_loop(function(*args, **kwargs))

    blocking.__name__ = blocking.__qualname__ = name
    blocking.__doc__ = doc
    return blocking


run_sync = _blocking(run, "run_sync", """:func:`run`, blocking (same arguments and result).

It runs on envhub's background event loop (the one behind ``envhub.runtime.session``), so it also
works where a loop is already running (a notebook), and the environment and policy stay
on one loop across calls. Interrupting the call cancels the run.""")


def _failure(summary: RunSummary, max_masked_fraction: float | None) -> str | None:
    """Why the run's results cannot stand as a finished run, or ``None``."""
    if summary.stopped == "circuit_breaker":
        outcome = (
            f"so {summary.missing} of {summary.planned} episodes were not run. Fix it, then "
            "resume the run (--resume) to run them and re-run the masked ones."
            if summary.missing
            else f"and {summary.masked} of its {summary.planned} episodes are masked. Fix it, "
            "then resume the run (--resume) to re-run the masked ones."
        )
        return (
            f"the rollout stopped: {summary.stop_detail}; the environment or model server "
            f"looks down, {outcome}"
        )
    if max_masked_fraction is not None and summary.masked_fraction > max_masked_fraction:
        errors = ", ".join(f"{kind}: {n}" for kind, n in sorted(summary.errors.items()))
        return (
            f"{summary.masked} of {summary.episodes} episodes "
            f"({summary.masked_fraction:.0%}) are masked, more than the "
            f"{max_masked_fraction:.0%} allowed (--max-masked-fraction); errors: {errors}. "
            "Masked episodes are infrastructure failures, not results: resume the run "
            "(--resume) to re-run them."
        )
    return None

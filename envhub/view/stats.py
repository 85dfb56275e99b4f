"""What the runs and run pages show about one run, computed from its index.

The summary is :func:`envhub.rollout.summary.summarize` over records rebuilt from the
index columns (so pass@k and every count mean exactly what ``envhub rollout`` prints).
``envhub rollout`` also writes ``RUN.jsonl.summary.json``; its wall time and plan
(planned, missing, why it stopped) are shown from there, since the trajectories alone
do not hold them, and only while it covers the same number of episodes as the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from markupsafe import Markup
from pydantic import ValidationError

from envhub.rollout.dispatcher import summary_path
from envhub.rollout.summary import RunSummary, summarize
from envhub.view import charts
from envhub.view.index import IndexState, RunIndex

__all__ = ["RunStats", "TaskStats", "read_sidecar", "run_stats"]


@dataclass(frozen=True)
class TaskStats:
    task_id: str
    episodes: int
    scored: int
    mean_reward: float | None
    success: float


@dataclass(frozen=True)
class RunStats:
    summary: RunSummary
    sidecar: RunSummary | None
    env: str | None
    env_version: str | None
    model: str | None
    policy_versions: list[str]
    distributions: list[str]  # the pins of the run's records ("envhub-rl-calc 0.2.0")
    task_set_hashes: list[str]  # more than one only in a file from before --resume checked
    tasks: list[TaskStats]
    charts: dict[str, Markup] = field(default_factory=dict)

    @property
    def wall_s(self) -> float | None:
        return self.sidecar.elapsed_s if self.sidecar else None


def read_sidecar(path: Path, episodes: int) -> RunSummary | None:
    """The summary ``envhub rollout`` wrote next to ``path``, when it matches the file."""
    try:
        sidecar = RunSummary.model_validate_json(summary_path(path).read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    return sidecar if sidecar.episodes == episodes else None


def run_stats(index: RunIndex, *, success_threshold: float = 1.0, detail: bool = True) -> RunStats:
    """The run's summary (kept in the index), and with ``detail`` its per-task rows and
    charts (without: empty, for the runs page, which shows only the summary)."""
    state: IndexState = index.state()
    summary = RunSummary.model_validate_json(
        index.memo(
            f"summary:{success_threshold!r}",
            lambda: summarize(
                index.summary_records(), success_threshold=success_threshold
            ).model_dump_json(),
        )
    )
    first = index.first_values()
    tasks: list[TaskStats] = []
    drawn: dict[str, Markup] = {}
    if detail:
        tasks = [TaskStats(*row) for row in index.by_task(success_threshold)]
        drawn = {  # safe: drawn by _charts, cached in the index's private (0o700) folder
            name: Markup(svg)
            for name, svg in json.loads(
                index.memo(
                    f"charts:{success_threshold!r}",
                    lambda: json.dumps(_charts(index, summary, tasks)),
                )
            ).items()
        }
    return RunStats(
        summary=summary,
        sidecar=read_sidecar(index.path, state.episodes),
        env=first["env"],
        env_version=first["env_version"],
        model=first["model"],
        policy_versions=index.distinct("policy_version"),
        distributions=index.distinct("env_distribution"),
        task_set_hashes=index.distinct("task_set_hash"),
        tasks=tasks,
        charts=drawn,
    )


def _charts(index: RunIndex, summary: RunSummary, tasks: list[TaskStats]) -> dict[str, Markup]:
    tokens = index.column("prompt_tokens", "completion_tokens")
    drawn = {
        "reward": charts.histogram(index.column("reward"), "reward distribution"),
        "turns": charts.histogram(index.column("turns"), "turns per episode"),
        "stop_reasons": charts.bars(
            sorted(summary.stop_reasons.items(), key=lambda kv: -kv[1]), "stop reasons"
        ),
        "masked": charts.bars(
            sorted(summary.errors.items(), key=lambda kv: -kv[1]), "masked by cause"
        ),
        "llm_request": charts.histogram(index.request_latencies(), "LLM latency per request", "s"),
        "llm_s": charts.histogram(index.column("llm_s"), "LLM time per episode", "s"),
        "env_s": charts.histogram(index.column("env_s"), "env time per episode", "s"),
        # a policy that reports no usage (the reference policy, some servers) leaves 0s:
        # a histogram of them would be one full bar at 0, read as "episodes cost nothing"
        "tokens": charts.histogram(tokens, "tokens per episode")
        if any(tokens)
        else charts.note("tokens per episode", "no token counts recorded"),
        "task_success": charts.bars(
            [(t.task_id, t.success) for t in sorted(tasks, key=lambda t: t.success)],
            "success by task (lowest first)",
            "{:.2f}",
            noun="tasks",
        ),
    }
    over_time = [
        (f"{10 * tenth}–{10 * tenth + 10}%", mean)
        for tenth, mean in index.reward_by_position(10)
        if mean is not None
    ]
    if len(over_time) > 1:
        drawn["over_time"] = charts.bars(over_time, "mean reward by tenth of the run", "{:.3f}")
    by_version = [
        (f"v{version}", mean)
        for version, mean in index.grouped("policy_version", "avg(reward)")
        if version is not None and mean is not None
    ]
    if by_version:
        drawn["policy_version"] = charts.bars(
            by_version, "mean reward by policy version", "{:.3f}", noun="policy versions"
        )
    return drawn

"""The group seam: score a GRPO group once all its episodes are finished.

A group-relative judge (:class:`~envhub.rewards.judge.GroupJudge`) needs every member of a
group before it can score any of them. A stream (:mod:`envhub.rollout.stream`) gathers a
group before handing it over, and ranks it there (:meth:`GroupScoring.scored`); the
dispatcher of ``run`` runs episodes one by one and records each as it ends, so
:class:`GroupScoredRunner` sits between them: it runs each
episode with the runner it wraps and holds the trajectory until the last member of its
group ends; that member's call ranks the group in one request and returns the whole
group, so the dispatcher records all members together (as it records a tree's episodes)
and no worker ever waits for another's episode.

What lands on each scored member (:class:`GroupScoring`): its score as the component
``ranker.name``, the record of the call in ``reward_info["judges"]``, and the reward
``env_weight * reward + weight * score`` (by default the judge's score replaces the
environment's). Masked members are not
shown to the judge and stay as they are. When the judge fails (its endpoint, or no
verdict after its retries), every scored member of the group is masked with
``stop_reason="judge_error"``: a group is ranked whole or not at all.

A run stopped before a group is complete (a deadline, an interrupt) records none of its
held members; ``--resume`` runs them again, and ranks them among themselves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from envhub.errors import JudgeError
from envhub.rewards.judge import GroupRanker
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.trajectory import ErrorInfo, Trajectory

__all__ = ["GroupScoredRunner", "GroupScoring", "final_answer", "task_question"]


def task_question(trajectory: Trajectory) -> str:
    """The task as the policy first read it: the text of the messages before the first
    assistant message (the system prompt and the user's first turn)."""
    parts = []
    for message in trajectory.messages:
        if message.get("role") == "assistant":
            break
        content = message.get("content")
        if isinstance(content, str) and content:
            parts.append(content)
    return "\n\n".join(parts)


def final_answer(trajectory: Trajectory) -> str:
    """The episode's answer: its last assistant message's text, and its tool calls (a
    terminal ``answer`` call is the answer) written as ``name(arguments)``."""
    for message in reversed(trajectory.messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            text = content if isinstance(content, str) else ""
            functions = [c.get("function") or {} for c in message.get("tool_calls") or []]
            calls = [f"{f.get('name')}({f.get('arguments')})" for f in functions]
            return "\n".join(part for part in (text, *calls) if part)
    return ""


@dataclass(frozen=True)
class GroupScoring:
    """How a group is ranked: by ``ranker``, each member's reward becoming ``env_weight *
    reward + weight * score``; ``answer_of`` and ``question_of`` say what the judge is
    shown of an episode."""

    ranker: GroupRanker
    weight: float = 1.0
    env_weight: float = 0.0
    answer_of: Callable[[Trajectory], str] = final_answer
    question_of: Callable[[Trajectory], str] = task_question

    @classmethod
    def of(cls, judge: GroupRanker | GroupScoring) -> GroupScoring:
        """``judge`` as a scoring (a bare ranker: its scores replace the rewards)."""
        return judge if isinstance(judge, GroupScoring) else cls(judge)

    async def scored(self, group: Sequence[Trajectory]) -> list[Trajectory]:
        """``group`` (all of a group's members, ended) ranked in one request, in order of
        ``sample_index`` (module docstring)."""
        group = sorted(group, key=lambda t: t.sample_index)
        scored = [t for t in group if not t.masked]
        if not scored:
            return group
        try:
            verdicts = await self.ranker.rank(
                self.question_of(scored[0]), [self.answer_of(t) for t in scored]
            )
        except JudgeError as exc:
            masked = {t.trajectory_id: _judge_masked(t, exc) for t in scored}
            return [masked.get(t.trajectory_id, t) for t in group]
        verdict_of = {t.trajectory_id: v for t, v in zip(scored, verdicts, strict=True)}
        out = []
        for trajectory in group:
            verdict = verdict_of.get(trajectory.trajectory_id)
            if verdict is None:
                out.append(trajectory)
                continue
            info: dict[str, Any] = dict(trajectory.reward_info)
            info["judges"] = {**info.get("judges", {}), **verdict.info["judges"]}
            env_reward = trajectory.reward or 0.0
            out.append(trajectory.model_copy(update={
                "reward": self.env_weight * env_reward + self.weight * verdict.score,
                "reward_components": {**trajectory.reward_components, **verdict.components},
                "reward_info": info,
            }))  # fmt: skip
        return out


class GroupScoredRunner:
    """Runs episodes with ``runner`` and ranks each group with ``scoring`` once its
    members (the episodes of ``specs``, by group id: what this run plays) have all ended
    (module docstring)."""

    def __init__(
        self, runner: EpisodeRunner, scoring: GroupScoring, specs: Iterable[EpisodeSpec]
    ) -> None:
        self.runner = runner
        self.scoring = scoring
        self.members = Counter(spec.group_id for spec in specs)
        self._held: dict[str, list[Trajectory]] = {}

    async def run(self, spec: EpisodeSpec) -> list[Trajectory]:
        """The whole group when ``spec`` is its last member to end, else nothing yet."""
        trajectory = await self.runner.run(spec)
        held = self._held.setdefault(spec.group_id, [])
        held.append(trajectory)
        if len(held) < self.members[spec.group_id]:
            return []
        del self._held[spec.group_id]
        return await self.scoring.scored(held)


def _judge_masked(trajectory: Trajectory, exc: JudgeError) -> Trajectory:
    return trajectory.model_copy(update={
        "masked": True,
        "reward": None,
        "stop_reason": "judge_error",
        "error": ErrorInfo(kind=exc.code, message=str(exc)[:2000]),
    })  # fmt: skip

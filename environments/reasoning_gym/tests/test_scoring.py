"""The reward is the dataset's own ``score_answer`` of the recorded final answer, for
wrong and partial answers too; answers that would run code are refused or contained."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from envhub_reasoning_gym import EVALUATING_DATASETS, default_datasets, plain_expression
from reasoning_gym.factory import create_dataset
from reasoning_gym.utils import extract_answer

import envhub
from envhub.policies.base import Completion, GenerateRequest
from envhub.rollout.dispatcher import dispatch, plan_episodes
from envhub.rollout.episode import EpisodeRunner
from envhub.trajectory import Trajectory
from envhub.types import ToolCall


def _variant(gold: str, sample: int) -> str:
    """Wrong, partial and right answers: a padded copy, a truncation, nothing, a list."""
    return [gold + " " + gold, gold[: len(gold) // 2], "", str(list(gold[:40])), gold][sample]


class ScriptedAnswers:
    """Answers each task with variant ``sample_index`` of its gold answer; the last
    variant as a final message in ``<answer>`` tags instead of the tool."""

    model = "scripted"
    variants = 5

    async def generate(self, request: GenerateRequest) -> Completion:
        assert request.task is not None
        text = _variant(str(request.task.answer), request.sample_index)
        if request.sample_index == self.variants - 1:
            return Completion(content=f"Thinking.\n<answer>{text}</answer>", tool_calls=[])
        call = ToolCall(id="a", name="answer", arguments={"answer": text})
        return Completion(content=None, tool_calls=[call], finish_reason="tool_calls")

    async def aclose(self) -> None:
        """Holds nothing."""


def _recorded_answer(trajectory: Trajectory) -> str | None:
    """The final answer as the trajectory records it: the answer call, else the tags."""
    last = [m for m in trajectory.messages if m["role"] == "assistant"][-1]
    for call in last.get("tool_calls") or []:
        if call["function"]["name"] == "answer":
            return str(json.loads(call["function"]["arguments"])["answer"])
    return extract_answer(last.get("content") or "")


async def _run(policy: Any, datasets: list[str], **options: Any) -> list[Trajectory]:
    env = envhub.make("reasoning_gym", datasets=datasets, size=1, **options)
    results: list[Trajectory] = []
    try:
        runner = EpisodeRunner(env, policy, max_env_attempts=1)
        ids = await env.task_ids()
        plan = plan_episodes(ids, ScriptedAnswers.variants)
        await dispatch(runner, plan, concurrency=32, on_result=results.append)
    finally:
        await env.aclose()
    return results


def test_reward_equals_score_answer_on_every_recorded_answer() -> None:
    datasets = default_datasets()
    trajectories = asyncio.run(_run(ScriptedAnswers(), datasets, seed=3))
    assert len(trajectories) == len(datasets) * ScriptedAnswers.variants
    partial = raised = 0
    datasets_by_name: dict[str, Any] = {}
    for trajectory in trajectories:
        assert not trajectory.masked, trajectory.error
        name = trajectory.task_id.rsplit("-", 2)[0]
        if name not in datasets_by_name:
            datasets_by_name[name] = create_dataset(name, seed=3, size=1)
        dataset = datasets_by_name[name]
        entry = dataset[0]
        answer = _recorded_answer(trajectory)
        assert answer is not None
        if name in EVALUATING_DATASETS and not plain_expression(answer):
            expected = 0.0  # refused unevaluated (tested in test_bad_input)
        else:
            try:
                expected = float(dataset.score_answer(answer, entry))
            except Exception:  # the scorer's own failure on this answer scores 0
                expected, raised = 0.0, raised + 1
        assert trajectory.reward == expected, (trajectory.task_id, answer, expected)
        assert trajectory.reward_components == {"score": expected, "answered": 1.0}
        partial += 0.0 < expected < 1.0
    assert partial >= 20  # partial credit is kept, not rounded
    assert raised >= 1  # some scorers raise on malformed answers: a 0, not a masked episode


def test_gold_answers_of_evaluating_datasets_are_plain_expressions() -> None:
    """The screen in front of eval-ing scorers lets every real answer shape through."""
    for name in sorted(EVALUATING_DATASETS):
        for seed in (0, 1):
            dataset = create_dataset(name, seed=seed, size=30)
            for index in range(30):
                answer = dataset[index]["answer"]
                assert plain_expression(answer), (name, seed, index, answer)


def test_plain_expression_screen() -> None:
    for plain in ["3*Integral(x**3*cos(3*x), x) + C", "-4*(-2*x - 8)**(3/2)/3 + C", "[['Q', '_']]"]:
        assert plain_expression(plain)
    for code in [
        "__import__('os')",
        "open('x', 'w')",
        "exec(chr(95))",
        "x.__class__",
        "(lambda: 1)()",
        "9**9**9",
        "[c for c in 'ab']",
        "'abc'",
    ]:
        assert not plain_expression(code), code

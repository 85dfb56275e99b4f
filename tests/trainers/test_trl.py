"""TRL integration: environment objects over envhub sessions, the rollout function, and
a real ``GRPOTrainer`` training a tiny model on ``calc`` for a few CPU steps."""

from __future__ import annotations

import math
from typing import Any

import pytest

import envhub
from envhub.errors import InvalidRequest
from envhub.runtime.sync import run_sync
from envhub.trainers.trl import envhub_reward, environment_factory, task_dataset
from envhub.trainers.trl_rollout import EnvhubRollout
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer
from tests.trainers.conftest import TRAIN_TASKS
from tests.trainers.factories import hand_tree, split_turn, trajectory, turn

pytest.importorskip("trl")


def _gold(calc: envhub.LocalEnvironment, task_id: str) -> tuple[Any, str, str]:
    task = calc.tasks.get(task_id)
    expression = task.gold_actions[0].arguments["expression"]
    return task, expression, str(task.answer)


def test_tool_methods_carry_the_envhub_schemas(calc: envhub.LocalEnvironment) -> None:
    from transformers.utils import get_json_schema

    environment = environment_factory(calc)()
    for schema in calc.tools:
        name = schema["function"]["name"]
        rendered = get_json_schema(getattr(environment, name))["function"]
        assert rendered["name"] == name
        assert rendered["description"] == schema["function"]["description"]
        params, expected = rendered["parameters"], schema["function"]["parameters"]
        assert params["required"] == expected["required"]
        for arg, spec in expected["properties"].items():
            assert params["properties"][arg]["type"] == spec["type"]
            assert params["properties"][arg]["description"] == spec["description"]


def test_environment_object_plays_an_envhub_episode(calc: envhub.LocalEnvironment) -> None:
    factory = environment_factory(calc)
    environment = factory()
    task, expression, answer = _gold(calc, TRAIN_TASKS[0])
    assert environment.reset(task_id=task.id, prompt=task.prompt) is None
    assert environment.calculate(expression="1 +").startswith("Error:")  # model-readable
    assert environment.calculate(expression=expression) == answer
    assert environment.answer(value=answer) == "answer recorded"
    assert environment.calculate(expression="1").startswith("Error: the episode has ended")
    rewards = envhub_reward(
        completions=[[{"role": "assistant", "content": ""}]], environments=[environment]
    )
    assert rewards == [1.0]
    (episode,) = factory.episodes
    assert (episode.task_id, episode.reward, episode.stop_reason) == (task.id, 1.0, "terminal_tool")
    assert episode.components == {"correct": 1.0, "answered": 1.0}


def test_final_text_answers_reach_the_environment(calc: envhub.LocalEnvironment) -> None:
    factory = environment_factory(calc)
    environment = factory()
    task = calc.tasks.get(TRAIN_TASKS[1])
    environment.reset(task_id=task.id, prompt=task.prompt)
    completion = [{"role": "assistant", "content": "I think it is 7"}]
    assert envhub_reward(completions=[completion], environments=[environment]) == [0.0]
    assert factory.episodes[0].stop_reason == "final_answer"


def test_bad_rows_are_typed_errors(calc: envhub.LocalEnvironment) -> None:
    environment = environment_factory(calc)()
    with pytest.raises(InvalidRequest, match="task_id"):
        environment.reset(prompt=[{"role": "user", "content": "hi"}])
    with pytest.raises(InvalidRequest, match="differs"):
        environment.reset(task_id=TRAIN_TASKS[0], prompt=[{"role": "user", "content": "hi"}])


def test_remote_sessions_back_the_same_objects(calc_server: str) -> None:
    calc = envhub.make("calc")
    with pytest.raises(InvalidRequest, match="set by its server"):
        environment_factory(calc_server, env_name="calc", max_turns=3)
    factory = environment_factory(calc_server, env_name="calc")
    dataset = task_dataset(factory.env, split="train", limit=3)
    assert dataset["task_id"][0] == "calc-0-00000"
    environment = factory()
    task, expression, answer = _gold(calc, TRAIN_TASKS[0])
    # a remote dataset carries a placeholder prompt; reset supplies the session's text
    text = environment.reset(**dataset[0])
    assert task.prompt[-1]["content"] in text
    assert environment.calculate(expression=expression) == answer
    environment.answer(value=answer)
    assert envhub_reward(completions=[[]], environments=[environment]) == [1.0]
    assert factory.episodes[0].reward == 1.0
    factory.close()


def test_rollout_func_returns_the_server_token_ids(calc: envhub.LocalEnvironment) -> None:
    prompts = [calc.tasks.get(t).prompt for t in TRAIN_TASKS for _ in range(2)]
    with ScriptedServer(ScriptConfig(token_ids=True, break_prefix_at_turn=2)) as server:
        with EnvhubRollout(calc, model="scripted", base_urls=[server.base_url]) as rollout:
            trajectories = run_sync(rollout.run(prompts, 2, policy_version=5))
            out = rollout.to_trl(trajectories, eos_token_id=2)
    assert [t.group_id for t in trajectories] == [
        f"{TRAIN_TASKS[0]}#v5:0",
        f"{TRAIN_TASKS[0]}#v5:0",
        f"{TRAIN_TASKS[1]}#v5:1",
        f"{TRAIN_TASKS[1]}#v5:1",
    ]
    assert [t.sample_index for t in trajectories] == [0, 1, 0, 1]
    assert out["env_reward"] == [t.reward for t in trajectories]
    # the scripted server breaks the prefix at the third turn: drift="mask" voids the
    # tokens of those samples while their (valid) reward stays in the group baseline
    assert all(sum(mask) == 0 for mask in out["env_mask"])


def test_rollout_func_marks_exactly_the_sampled_tokens(calc: envhub.LocalEnvironment) -> None:
    prompts = [calc.tasks.get(TRAIN_TASKS[0]).prompt]
    with ScriptedServer(ScriptConfig(token_ids=True)) as server:
        with EnvhubRollout(calc, model="scripted", base_urls=[server.base_url]) as rollout:
            (trajectory,) = run_sync(rollout.run(prompts, 1, policy_version=0))
            out = rollout.to_trl([trajectory], eos_token_id=2)
    turns = trajectory.turns
    assert len(turns) == 3 and all(t.prefix_ok in (None, True) for t in turns)
    full = turns[-1].prompt_token_ids + turns[-1].completion_token_ids
    assert out["prompt_ids"][0] + out["completion_ids"][0] == full
    assert out["prompt_ids"][0] == turns[0].prompt_token_ids
    sampled = [i for i, m in zip(out["completion_ids"][0], out["env_mask"][0], strict=True) if m]
    assert sampled == [i for t in turns for i in t.completion_token_ids]
    logprobs = [lp for lp, m in zip(out["logprobs"][0], out["env_mask"][0], strict=True) if m]
    assert logprobs == [lp for t in turns for lp in t.completion_logprobs]


def test_rollout_func_carries_per_token_policy_versions(calc: envhub.LocalEnvironment) -> None:
    """A weight update split the first turn: each completion token carries the version
    that sampled it (-1 where env_mask is 0), aligned with completion_ids."""
    rollout = EnvhubRollout(calc, task_for_prompt=lambda _: TRAIN_TASKS[0])
    empty = trajectory("g", 1, 0.0, [turn([1, 2], [], version=5)])
    out = rollout.to_trl([split_turn("g", 0, 1.0), empty], eos_token_id=2)
    assert out["completion_ids"][0] == [10, 11, 12, 13, 20, 21, 14, 15]
    assert out["env_mask"][0] == [1, 1, 1, 1, 0, 0, 1, 1]
    assert out["policy_versions"][0] == [3, 3, 4, 4, -1, -1, 4, 4]
    # an empty completion is one EOS stand-in, never sampled
    assert out["completion_ids"][1] == [2] and out["policy_versions"][1] == [-1]
    for key in ("logprobs", "env_mask", "policy_versions"):
        assert [len(v) for v in out[key]] == [len(c) for c in out["completion_ids"]]


def test_rollout_func_carries_trees(calc: envhub.LocalEnvironment) -> None:
    """With ``tree``: the tree fields, per-token node advantages aligned with
    completion_ids, and a child's shared turns moved into its prompt, untrained."""
    from envhub.trainers.grpo import build_batch

    rollout = EnvhubRollout(calc, task_for_prompt=lambda _: TRAIN_TASKS[0])
    tree = hand_tree()
    flat = rollout.to_trl(tree, eos_token_id=2)
    assert "token_advantages" not in flat and flat["prompt_ids"][3] == [1, 2, 3]
    out = rollout.to_trl(tree, eos_token_id=2, tree="treerl")
    assert out["parent_id"] == [None, "t-0", "t-0", "t-1"] and out["branch_turn"] == [None, 1, 2, 2]
    assert len({*out["tree_id"]}) == 1
    # C (forked from A after its turn 2) trains its own last turn only
    assert out["prompt_ids"][3] == [1, 2, 3, 10, 11, 91, 30, 31, 92]
    assert out["completion_ids"][3] == [50, 51] and out["env_mask"][3] == [1, 1]
    # the root's sample trains all its turns, each with its node's advantage
    assert out["env_mask"][0] == [1, 1, 0, 1, 1, 0, 1]
    assert out["token_advantages"][0] == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.5]
    # the same values as build_batch's, token for token
    batch = build_batch(tree, tree="treerl", return_tensors=None)
    for row, advantages, sample in zip(batch.rows, batch.advantages, out["token_advantages"],
                                       strict=True):  # fmt: skip
        assert advantages[row.prompt_length : len(row)] == sample
    # a tree with a masked leaf is not trained on at all
    tree[3] = tree[3].model_copy(update={"masked": True, "reward": None})
    masked = rollout.to_trl(tree, eos_token_id=2, tree="treerl")
    assert all(sum(mask) == 0 for mask in masked["env_mask"])
    assert masked["env_reward"][3] is None


def _changed(model: Any, before: dict[str, Any]) -> list[str]:
    import torch

    return [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]


def test_grpo_trainer_learns_from_envhub_rewards(
    calc: envhub.LocalEnvironment, tokenizer: Any, trl_imitated_model: Any, tmp_path: Any
) -> None:
    """A real GRPOTrainer, a few CPU steps: TRL generates (multi-turn, with tool calls run
    through envhub sessions), envhub scores, and the weights move."""
    from trl import GRPOConfig, GRPOTrainer

    factory = environment_factory(calc)
    dataset = task_dataset(calc, split=None).filter(lambda row: row["task_id"] in TRAIN_TASKS)
    steps, batch = 2, 4  # each step: two groups of two, one group per task
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=batch,
        num_generations=2,
        max_completion_length=128,
        max_tool_calling_iterations=3,
        learning_rate=1e-3,
        temperature=0.9,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        gradient_checkpointing=False,  # nothing to save on a tiny model; only recompute
        seed=0,
    )
    trainer = GRPOTrainer(
        model=trl_imitated_model,
        reward_funcs=envhub_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=factory,
    )
    before = {n: p.detach().clone() for n, p in trl_imitated_model.named_parameters()}
    trainer.train()

    # every rollout was an envhub episode of a dataset task, scored by envhub
    assert len(factory.episodes) == steps * batch
    assert {e.task_id for e in factory.episodes} == set(TRAIN_TASKS)
    logged = [
        h["rewards/envhub_reward/mean"]
        for h in trainer.state.log_history
        if "rewards/envhub_reward/mean" in h
    ]
    per_step = [factory.episodes[i * batch : (i + 1) * batch] for i in range(steps)]
    assert logged == pytest.approx([sum(e.reward for e in step) / batch for step in per_step])
    rewards = {e.reward for e in factory.episodes}
    assert rewards == {0.0, 1.0}  # the imitation model succeeds sometimes: a GRPO signal
    assert any(e.stop_reason == "terminal_tool" for e in factory.episodes)
    assert _changed(trl_imitated_model, before)
    assert all(math.isfinite(h.get("loss", 0.0)) for h in trainer.state.log_history)


def test_grpo_trainer_trains_on_rollout_func_samples(
    calc: envhub.LocalEnvironment, tokenizer: Any, tmp_path: Any
) -> None:
    """TRL accepts EnvhubRollout's output: its loss mask is our env_mask, its rewards envhub's."""
    from trl import GRPOConfig, GRPOTrainer

    from envhub.trainers.tiny import tiny_llama

    dataset = task_dataset(calc, split=None).filter(lambda row: row["task_id"] in TRAIN_TASKS)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        beta=0.0,
    )
    with (
        ScriptedServer(ScriptConfig(token_ids=True)) as server,
        EnvhubRollout(calc, model="scripted", base_urls=[server.base_url]) as rollout,
    ):
        trainer = GRPOTrainer(
            model=tiny_llama(tokenizer),
            reward_funcs=envhub_reward,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollout,
        )
        trainer.train()
    trajectories = rollout.last_trajectories
    assert len(trajectories) == 4 and {t.task_id for t in trajectories} == set(TRAIN_TASKS)
    (logged,) = [h for h in trainer.state.log_history if "rewards/envhub_reward/mean" in h]
    assert logged["rewards/envhub_reward/mean"] == pytest.approx(
        sum(t.reward for t in trajectories) / 4
    )
    # TRL counts only env_mask=1 tokens as completion tokens: exactly the sampled ones
    sampled = [sum(len(turn.completion_token_ids) for turn in t.turns) for t in trajectories]
    assert logged["completions/mean_length"] == pytest.approx(sum(sampled) / 4)

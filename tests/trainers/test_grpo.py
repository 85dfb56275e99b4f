"""Advantage estimators and the GRPO batch builder's token invariants."""

from __future__ import annotations

import math
import statistics

import pytest

from envhub.errors import InvalidRequest
from envhub.trainers.grpo import (
    build_batch,
    compute_advantages,
    group_advantages,
    task_normalize,
)
from envhub.trainers.token_rows import trajectory_rows
from tests.trainers.factories import drifted, trajectory, turn, two_turn

# -- advantages ------------------------------------------------------------------------------


def test_grpo_is_standardised_within_the_group() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0]
    adv = group_advantages(rewards, "grpo")
    mean, std = statistics.mean(rewards), statistics.stdev(rewards)
    assert adv == pytest.approx([(r - mean) / std for r in rewards], rel=1e-5)
    assert sum(adv) == pytest.approx(0.0, abs=1e-9)


def test_dr_grpo_only_centres() -> None:
    assert group_advantages([3.0, 1.0], "dr_grpo") == [1.0, -1.0]
    # the std division of grpo would scale this nearly-uniform group up; Dr. GRPO does not
    assert group_advantages([1.0, 1.0, 1.0, 0.9], "dr_grpo") == pytest.approx(
        [0.025, 0.025, 0.025, -0.075]
    )


def test_rloo_is_leave_one_out() -> None:
    rewards = [1.0, 0.0, 0.5, 0.25]
    expected = [r - (sum(rewards) - r) / (len(rewards) - 1) for r in rewards]
    assert group_advantages(rewards, "rloo") == pytest.approx(expected)


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
def test_degenerate_groups_give_zero(estimator: str) -> None:
    assert group_advantages([0.7], estimator) == [0.0]  # type: ignore[arg-type]
    assert group_advantages([0.5, 0.5, 0.5], estimator) == [0.0, 0.0, 0.0]  # type: ignore[arg-type]


def test_unknown_estimator_is_a_typed_error() -> None:
    with pytest.raises(InvalidRequest, match="ppo"):
        group_advantages([1.0, 0.0], "ppo")  # type: ignore[arg-type]


def test_groups_are_found_in_any_order() -> None:
    adv = compute_advantages([1.0, 5.0, 0.0, 3.0], ["a", "b", "a", "b"], estimator="dr_grpo")
    assert adv == [0.5, 1.0, -0.5, -1.0]


def test_task_normalization_equalises_scales_across_tasks() -> None:
    # env "big" has rewards 100x larger than env "small"; after task normalization each
    # task's advantages have mean 0 and std 1, so neither dominates the gradient
    rewards = [100.0, 0.0, 200.0, 0.0, 1.0, 0.0, 0.5, 0.0]
    groups = ["b1", "b1", "b2", "b2", "s1", "s1", "s2", "s2"]
    tasks = ["big"] * 4 + ["small"] * 4
    plain = compute_advantages(rewards, groups, estimator="dr_grpo")
    assert max(map(abs, plain[:4])) > 100 * max(map(abs, plain[4:]))
    normalised = compute_advantages(rewards, groups, estimator="dr_grpo", task_keys=tasks)
    for part in (normalised[:4], normalised[4:]):
        assert statistics.mean(part) == pytest.approx(0.0, abs=1e-9)
        assert statistics.stdev(part) == pytest.approx(1.0, rel=1e-4)
    assert task_normalize([1.0, 1.0], ["x", "x"]) == [0.0, 0.0]


# -- token rows ------------------------------------------------------------------------------


def test_contiguous_turns_make_one_row_with_exact_masks() -> None:
    traj = two_turn("g", 0, 1.0, version=7)
    (row,) = trajectory_rows(traj)
    assert row.input_ids == [1, 2, 3, 10, 11, 20, 21, 12, 13, 14]
    assert row.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1]
    assert row.old_logprobs == pytest.approx([0, 0, 0, -0.1, -0.2, 0, 0, -0.1, -0.2, -0.3])
    assert row.policy_versions == [-1, -1, -1, 7, 7, -1, -1, 8, 8, 8]
    assert row.prompt_length == 3 and not row.retokenized and row.mask_reason is None


def test_drift_split_makes_one_row_per_contiguous_run() -> None:
    first, second = trajectory_rows(drifted("g", 0, 1.0), drift="split")
    assert (first.segment, second.segment) == (0, 1)
    assert first.input_ids == [1, 2, 3, 10, 11] and first.loss_mask == [0, 0, 0, 1, 1]
    assert second.input_ids == [1, 2, 3, 10, 99, 20, 21, 12, 13]
    # only the second turn's own completion is trained in the re-rendered row
    assert second.loss_mask == [0, 0, 0, 0, 0, 0, 0, 1, 1]
    assert second.policy_versions[-2:] == [1, 1]


def test_drift_mask_zeroes_the_trajectory_with_a_reason() -> None:
    (row,) = trajectory_rows(drifted("g", 0, 1.0), drift="mask")
    assert row.mask_reason == "token_drift" and row.sampled_tokens == 0


def test_recorded_prefix_break_is_trusted_even_when_ids_line_up() -> None:
    first = turn([1, 2], [3])
    second = turn([1, 2, 3, 4], [5], prefix_ok=False)
    rows = trajectory_rows(trajectory("g", 0, 1.0, [first, second]), drift="split")
    assert len(rows) == 2


def test_unequal_logprobs_mask_the_trajectory() -> None:
    bad = turn([1, 2], [3, 4, 5], logprobs=[-0.1, -0.2])
    (row,) = trajectory_rows(trajectory("g", 0, 1.0, [bad]))
    assert row.mask_reason == "length_mismatch" and row.sampled_tokens == 0


def test_missing_ids_without_a_tokenizer_are_masked_not_guessed() -> None:
    t = turn([1], [2])
    t.prompt_token_ids = None
    (row,) = trajectory_rows(trajectory("g", 0, 1.0, [t]))
    assert row.mask_reason == "missing_token_ids"


# -- batches ---------------------------------------------------------------------------------


def test_batch_pads_and_places_advantages_on_sampled_tokens_only() -> None:
    torch = pytest.importorskip("torch")
    short = trajectory("g", 1, 0.0, [turn([1, 2], [10], version=3)])
    batch = build_batch([two_turn("g", 0, 1.0), short], estimator="dr_grpo", pad_token_id=0)
    assert batch.input_ids.shape == (2, 10)
    assert batch.input_ids[1].tolist() == [1, 2, 10] + [0] * 7
    assert batch.attention_mask[1].tolist() == [1, 1, 1] + [0] * 7
    assert batch.loss_mask[1].tolist() == [0, 0, 1] + [0] * 7
    assert batch.row_advantages == [0.5, -0.5]
    assert batch.advantages[0].tolist() == [0, 0, 0, 0.5, 0.5, 0, 0, 0.5, 0.5, 0.5]
    assert batch.advantages[1].tolist() == [0, 0, -0.5] + [0] * 7
    assert batch.policy_versions[1].tolist() == [-1, -1, 3] + [-1] * 7
    assert batch.old_logprobs.dtype == torch.float32 and batch.min_policy_version == 0


def test_lists_and_tensors_agree() -> None:
    pytest.importorskip("torch")
    trajectories = [two_turn("g", 0, 1.0), drifted("g", 1, 0.0), two_turn("h", 0, 0.3)]
    trajectories.append(trajectory("h", 1, 0.9, [turn([5, 6, 7, 8], [9, 9, 9, 9, 9])]))
    tensors = build_batch(trajectories, pad_to_multiple_of=8)
    lists = build_batch(trajectories, pad_to_multiple_of=8, return_tensors=None)
    assert tensors.input_ids.shape[1] == 16
    for name in ("input_ids", "attention_mask", "loss_mask", "policy_versions"):
        assert getattr(tensors, name).tolist() == getattr(lists, name)
    for name in ("old_logprobs", "advantages"):
        assert getattr(tensors, name).flatten().tolist() == pytest.approx(
            [x for row in getattr(lists, name) for x in row], abs=1e-6
        )


def test_masked_trajectories_leave_the_baseline_and_the_batch() -> None:
    group = [
        two_turn("g", 0, 1.0),
        two_turn("g", 1, 0.0),
        trajectory("g", 2, None, [turn([1], [2])], masked=True),
    ]
    batch = build_batch(group, estimator="dr_grpo", return_tensors=None)
    # the masked sample is not a zero reward: the baseline is mean(1, 0), not mean(1, 0, 0)
    assert batch.row_advantages == [0.5, -0.5]
    assert batch.dropped == {"masked": 1}
    assert [row.trajectory_id for row in batch.rows] == ["g-0", "g-1"]


def test_zero_variance_groups_are_dropped_unless_kept() -> None:
    same = [two_turn("flat", 0, 1.0), two_turn("flat", 1, 1.0)]
    varied = [two_turn("v", 0, 1.0), two_turn("v", 1, 0.0)]
    batch = build_batch(same + varied, return_tensors=None)
    assert {row.group_id for row in batch.rows} == {"v"}
    assert batch.dropped == {"zero_variance": 2}
    kept = build_batch(same + varied, drop_zero_variance=False, return_tensors=None)
    assert len(kept) == 4 and kept.row_advantages[:2] == [0.0, 0.0]


def test_drifted_rows_keep_their_reward_in_the_baseline() -> None:
    group = [two_turn("g", 0, 1.0), drifted("g", 1, 0.0), two_turn("g", 2, 0.0)]
    masked = build_batch(group, estimator="dr_grpo", drift="mask", return_tensors=None)
    assert masked.dropped == {"token_drift": 1}
    assert masked.row_advantages == pytest.approx([2 / 3, -1 / 3])  # baseline over all 3
    split = build_batch(group, estimator="dr_grpo", drift="split", return_tensors=None)
    assert [row.trajectory_id for row in split.rows] == ["g-0", "g-1", "g-1", "g-2"]
    assert split.row_advantages[1] == split.row_advantages[2] == pytest.approx(-1 / 3)


def test_overlong_rows_are_dropped() -> None:
    group = [two_turn("g", 0, 1.0), trajectory("g", 1, 0.0, [turn([1], [2])])]
    batch = build_batch(group, max_length=5, drop_zero_variance=False, return_tensors=None)
    assert batch.dropped == {"overlong": 1} and len(batch) == 1


def test_task_key_normalises_per_environment() -> None:
    group = [
        trajectory("a", 0, 10.0, [turn([1], [2])], env="big"),
        trajectory("a", 1, 0.0, [turn([1], [3])], env="big"),
        trajectory("b", 0, 0.1, [turn([1], [2])], env="small"),
        trajectory("b", 1, 0.0, [turn([1], [3])], env="small"),
    ]
    batch = build_batch(group, estimator="dr_grpo", task_key="env", return_tensors=None)
    assert batch.row_advantages[0] == pytest.approx(batch.row_advantages[2], rel=1e-4)
    with pytest.raises(InvalidRequest, match="task_key"):
        build_batch(group, task_key="planet")  # type: ignore[arg-type]


def test_retokenized_rows_are_flagged_and_carry_no_logprobs() -> None:
    tokenizer = pytest.importorskip("envhub.trainers.tiny").smollm2_tokenizer()
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "What is 2+3?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calculate", "arguments": '{"expression": "2+3"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "assistant", "content": "5"},
    ]
    traj = trajectory("g", 0, 1.0, [])
    traj.messages = messages
    traj.turns = [
        turn([], [], message_index=2, version=4),
        turn([], [], message_index=4, version=5),
    ]
    for t in traj.turns:
        t.prompt_token_ids = t.completion_token_ids = t.completion_logprobs = None
    (row,) = trajectory_rows(traj, tokenizer=tokenizer)
    assert row.retokenized and row.mask_reason is None
    sampled = [tid for tid, m in zip(row.input_ids, row.loss_mask, strict=True) if m]
    text = tokenizer.decode(sampled)
    assert '{"name": "calculate", "arguments": {"expression": "2+3"}}' in text
    assert text.endswith("5<|im_end|>") and "<tool_response>" not in text
    assert all(math.isnan(lp) for lp, m in zip(row.old_logprobs, row.loss_mask, strict=True) if m)
    assert {v for v, m in zip(row.policy_versions, row.loss_mask, strict=True) if m} == {4, 5}
    batch = build_batch([traj, trajectory("g", 1, 0.0, [turn([1], [2])])], tokenizer=tokenizer)
    assert batch.retokenized

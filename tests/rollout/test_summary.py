"""Summary math: unbiased pass@k on known inputs, masked episodes not scored."""

from __future__ import annotations

from math import comb

import pytest

from envhub.rollout.summary import k_values, pass_at_k, summarize


def test_pass_at_k_known_values() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - comb(3, 2) / comb(5, 2))  # 0.7
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(4, 2, 3) == 1.0  # any 3 of 4 include a success
    assert pass_at_k(10, 3, 10) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_k_values() -> None:
    assert k_values(1) == [1]
    assert k_values(4) == [1, 2, 4]
    assert k_values(6) == [1, 2, 4, 6]
    assert k_values(8) == [1, 2, 4, 8]


def record(task: str, reward: float | None, stop: str = "terminal_tool") -> dict:
    return {
        "task_id": task,
        "reward": reward,
        "masked": reward is None,
        "stop_reason": "env_error" if reward is None else stop,
        "error": {"kind": "sandbox_error", "message": "x"} if reward is None else None,
        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        "metrics": {"turns": 2, "tool_errors": 1},
    }


def test_summarize_groups_and_masks() -> None:
    records = [
        *[record("a", 1.0), record("a", 0.0), record("a", 0.0), record("a", 1.0)],
        *[record("b", 0.0), record("b", 0.0), record("b", 0.0), record("b", 0.5, "max_turns")],
        *[record("c", 1.0), record("c", None), record("c", 1.0), record("c", 0.0)],
    ]
    summary = summarize(records, elapsed_s=2.0, episodes_this_run=12)
    assert summary.episodes == 12 and summary.masked == 1 and summary.scored == 11
    assert summary.mean_reward == pytest.approx(4.5 / 11)
    # pass@1 = mean per-task success rate: a 2/4, b 0/4, c 2/3 (the masked one is unscored)
    assert summary.pass_at_k["pass@1"] == pytest.approx((0.5 + 0 + 2 / 3) / 3)
    assert summary.pass_at_k["pass@2"] == pytest.approx(
        (pass_at_k(4, 2, 2) + 0 + pass_at_k(3, 2, 2)) / 3
    )
    # pass@4 only over tasks with 4 scored samples (a, b)
    assert summary.pass_at_k["pass@4"] == pytest.approx((1.0 + 0.0) / 2)
    assert summary.stop_reasons == {"terminal_tool": 10, "max_turns": 1, "env_error": 1}
    assert summary.errors == {"sandbox_error": 1}
    assert summary.prompt_tokens == 120 and summary.tool_errors == 12
    assert summary.episodes_per_s == pytest.approx(6.0)


def test_success_threshold() -> None:
    summary = summarize([record("a", 0.5), record("a", 0.2)], success_threshold=0.5)
    assert summary.pass_at_k["pass@1"] == pytest.approx(0.5)

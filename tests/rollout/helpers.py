"""Running a handful of episodes against a scripted server, for the rollout tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from envhub.policies import OpenAIPolicy, RetryPolicy
from envhub.protocol import EnvironmentClient
from envhub.rollout.dispatcher import dispatch, plan_episodes
from envhub.rollout.episode import EpisodeRunner
from envhub.trajectory import Trajectory

FAST_RETRY = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05)


def openai_policy(*base_urls: str, **options: Any) -> OpenAIPolicy:
    options.setdefault("retry", FAST_RETRY)
    return OpenAIPolicy("scripted", list(base_urls), **options)


async def run_episodes(
    env: EnvironmentClient,
    policy: Any,
    task_ids: list[str],
    *,
    group_size: int = 1,
    concurrency: int = 8,
    **runner_options: Any,
) -> list[Trajectory]:
    runner = EpisodeRunner(env, policy, **runner_options)
    results: list[Trajectory] = []
    try:
        await dispatch(
            runner,
            plan_episodes(task_ids, group_size),
            concurrency=concurrency,
            on_result=results.append,
        )
    finally:
        await policy.aclose()
    return results


async def eventually(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Wait until ``condition()`` holds (polling), failing the test after ``timeout_s``."""
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


def assert_well_formed(trajectory: Trajectory, model: str, max_turns: int) -> None:
    """What a small real model's episode must be, whatever it said (malformed calls,
    unknown tools, plain text): scored, every call a string of arguments answered by
    exactly one tool message, and the record JSON. A runaway tool call can also meet
    calc's episode clock (slow on a loaded machine), or outgrow a small context."""
    import json

    assert not trajectory.masked, trajectory.error
    assert trajectory.model == model
    assert trajectory.reward is not None and 0.0 <= trajectory.reward <= 1.0
    assert trajectory.stop_reason in {
        "terminal_tool", "final_answer", "max_turns", "timeout", "context_length"
    }  # fmt: skip
    assert 1 <= len(trajectory.turns) <= max_turns
    for turn in trajectory.turns:
        message = trajectory.messages[turn.message_index]
        assert message["role"] == "assistant"
        for call in message.get("tool_calls", []):
            assert isinstance(call["function"]["arguments"], str)
            answers = [m for m in trajectory.messages if m.get("tool_call_id") == call["id"]]
            assert len(answers) == 1
    json.dumps(trajectory.messages)


def wait_for_lines(proc: Any, path: Any, lines: int, timeout_s: float = 60.0) -> None:
    """Block until ``path`` holds ``lines`` lines, ``proc`` (a ``Popen`` writing it) still
    running: the moment a test interrupts a rollout in the middle."""
    import time

    deadline = time.monotonic() + timeout_s
    while not path.exists() or path.read_bytes().count(b"\n") < lines:
        assert proc.poll() is None, "the rollout ended before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.02)



def assert_segment_rendered_afresh(
    trajectory: Trajectory, tokenizer: Any, segment: int = 1
) -> None:
    """The first prompt of a compacted trajectory's ``segment`` is its compacted context
    rendered afresh by ``tokenizer``'s chat template (what ``tito`` feeds after a
    compaction), not the previous prompt extended."""
    from envhub.trainers.token_rows import template_message

    context, shift = trajectory.segment_context(segment)
    first = trajectory.turns[trajectory.segment_starts()[segment]]
    fresh = tokenizer.apply_chat_template(
        [template_message(m) for m in context[: first.message_index + shift]],
        tools=trajectory.tools, add_generation_prompt=True, tokenize=True, return_dict=False,
    )  # fmt: skip
    assert first.prompt_token_ids == list(fresh)

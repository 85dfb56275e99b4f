"""The judges' endpoint: :class:`~envhub.rewards.judge.JudgeEndpoint` on the ``openai``
policy's client, so a judge is just another OpenAI-compatible endpoint (vLLM, SGLang,
llama.cpp, a hosted API) with the same load balancing over base URLs, retries of
429/5xx/timeouts and error translation as the policy, and no second HTTP mechanism.

``envhub.rewards`` is below this layer and cannot import it: environments (or programs)
build this endpoint from the operator's
:class:`~envhub.rewards.judge.JudgeEndpointConfig` and hand it to a judge.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from envhub.policies.base import GenerateRequest, SamplingParams
from envhub.policies.openai_compat import OpenAIPolicy, api_key_from
from envhub.policies.retry import RetryPolicy
from envhub.rewards.judge import JudgeEndpointConfig, JudgeReply
from envhub.types import Message

__all__ = ["OpenAIJudgeEndpoint"]


class OpenAIJudgeEndpoint:
    """Chat completions for a judge, one :class:`OpenAIPolicy` per event loop (its
    connections belong to the loop that opened them; episodes of a server or of several
    rollouts in one process may score on different loops)."""

    def __init__(self, config: JudgeEndpointConfig) -> None:
        self.config = config
        self.model = config.model
        self._api_key = api_key_from(config.api_key_env, "the judge")
        self._policies: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OpenAIPolicy] = (
            weakref.WeakKeyDictionary()
        )

    def _policy(self) -> OpenAIPolicy:
        loop = asyncio.get_running_loop()
        policy = self._policies.get(loop)
        if policy is None:
            config = self.config
            policy = self._policies[loop] = OpenAIPolicy(
                config.model,
                list(config.base_urls),
                sampling=SamplingParams(
                    temperature=config.temperature, max_tokens=config.max_tokens
                ),
                token_ids="off",
                retry=RetryPolicy(max_attempts=config.max_retries),
                api_key=self._api_key,
                request_timeout_s=config.request_timeout_s,
                endpoint_concurrency=None,  # the judge's own limit bounds it
            )
        return policy

    async def complete(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> JudgeReply:
        request = GenerateRequest(messages=messages, tools=tools or [], turn=0,
                                  task_id="judge", sample_index=0)  # fmt: skip
        completion = await self._policy().generate(request)
        return JudgeReply(completion.content or "", self.model, completion.tool_calls)

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        policy = self._policies.pop(loop, None)
        if policy is not None:
            await policy.aclose()

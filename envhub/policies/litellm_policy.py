"""The ``litellm`` policy: any litellm provider string (``anthropic/...``, ``openai/...``).

Same behaviour as the ``openai`` policy (tools, raw tool-call arguments, retries of
transient errors) minus token ids, which providers behind litellm do not return.
``litellm`` is imported when the policy is built (``pip install 'envhub-rl[litellm]'``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from envhub.errors import ContextLengthExceeded, InvalidRequest, PolicyError, TransientPolicyError
from envhub.policies.base import Completion, GenerateRequest, SamplingParams
from envhub.policies.openai_compat import parse_chat_response
from envhub.policies.retry import RetryPolicy
from envhub.types import chat_message

if TYPE_CHECKING:
    from envhub.policies.factory import PolicyConfig

__all__ = ["LiteLLMPolicy"]


class LiteLLMPolicy:
    """``litellm.acompletion`` with envhub's retry policy (litellm's own retries are off)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        sampling: SamplingParams | None = None,
        request_timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        # litellm otherwise fetches a price list from GitHub on import (no network here)
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            import litellm
        except ImportError:
            raise PolicyError(
                "the litellm policy needs `pip install 'envhub-rl[litellm]'`"
            ) from None
        self._litellm = litellm
        self._transient = (
            litellm.RateLimitError,
            litellm.Timeout,
            litellm.APIConnectionError,
            litellm.InternalServerError,
            litellm.ServiceUnavailableError,
        )
        self.model = model
        self.sampling = sampling or SamplingParams()
        self.retry = retry or RetryPolicy()
        self._kwargs: dict[str, Any] = {
            **self.sampling.to_request(),
            "timeout": request_timeout_s,
            "num_retries": 0,
        }
        if base_url:
            self._kwargs["api_base"] = base_url
        if api_key:
            self._kwargs["api_key"] = api_key

    @classmethod
    def from_config(cls, config: PolicyConfig) -> LiteLLMPolicy:
        """The ``litellm`` policy's factory (``envhub.policies`` entry point): at most one
        base URL (litellm's ``api_base``); of the transport options, the API key and the
        request timeout."""
        model = config.require_model("litellm")
        if len(config.base_urls) > 1:
            raise InvalidRequest("the litellm policy takes at most one --base-url (api_base)")
        return cls(
            model,
            base_url=config.base_urls[0] if config.base_urls else None,
            api_key=config.transport.get("api_key"),
            sampling=config.sampling,
            request_timeout_s=config.transport.get("request_timeout_s", 600.0),
            retry=config.retry,
        )

    async def generate(self, request: GenerateRequest) -> Completion:
        completion = await self.retry.call(lambda: self._call(request))
        for index, call in enumerate(completion.tool_calls):
            if not call.id:
                call.id = f"call_{request.turn}_{index}"
        return completion

    async def _call(self, request: GenerateRequest) -> Completion:
        kwargs = dict(self._kwargs)
        if request.tools:
            kwargs["tools"] = request.tools
        try:
            response = await self._litellm.acompletion(
                model=self.model, messages=[chat_message(m) for m in request.messages],
                **kwargs,
            )
        except self._transient as exc:
            raise TransientPolicyError(f"{type(exc).__name__}: {exc}") from exc
        except self._litellm.ContextWindowExceededError as exc:
            raise ContextLengthExceeded(f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # litellm's other errors (bad request, auth) are final
            raise PolicyError(f"{type(exc).__name__}: {exc}") from exc
        completion = parse_chat_response(response.model_dump())
        completion.prompt_token_ids = completion.completion_token_ids = None
        completion.completion_logprobs = None
        return completion

    async def aclose(self) -> None:
        """litellm keeps its own module-level clients."""

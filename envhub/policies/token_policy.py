"""A policy over any token-in/token-out sampler, recording exact token data.

Trainer-side generators (verl's server manager, a Hugging Face model in the training
process) take prompt ids and return sampled ids with their logprobs, instead of speaking
OpenAI chat. :class:`TokenPolicy` turns such a sampler into an envhub
:class:`~envhub.policies.base.Policy`: it renders the chat and tools with the tokenizer's
chat template, samples, records what a vLLM server with ``return_token_ids`` would (the
prompt ids, the sampled ids, the logprob of each sampled token), and parses tool calls
out of the decoded text (hermes format by default). The rollout engine then runs the
episode exactly as with a remote server, and the trajectory's ``prefix_ok`` shows
whether re-rendering the history kept earlier turns' ids intact.
"""

from __future__ import annotations

from typing import Any

from envhub.policies.base import Completion, GenerateRequest
from envhub.tokens.chat_template import template_message
from envhub.tokens.sample import Sample, Sampler  # a sampler's types, with the policy over it
from envhub.tokens.tool_call_parsers import ToolParser, parse_hermes

__all__ = ["Sample", "Sampler", "TokenPolicy"]


class TokenPolicy:
    """``Policy`` over ``sampler`` and ``tokenizer``; ``model`` is the recorded name."""

    def __init__(
        self,
        sampler: Sampler,
        tokenizer: Any,
        *,
        name: str,
        sampling: dict[str, Any] | None = None,
        tool_parser: ToolParser = parse_hermes,
    ) -> None:
        self.sampler = sampler
        self.tokenizer = tokenizer
        self.model = name
        self.sampling_record = dict(sampling or {})
        self.tool_parser = tool_parser

    async def generate(self, request: GenerateRequest) -> Completion:
        messages = [template_message(m) for m in request.messages]
        prompt_ids = list(
            self.tokenizer.apply_chat_template(
                messages,
                tools=request.tools or None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )
        sample = await self.sampler(prompt_ids)
        parsed = self.tool_parser(self.tokenizer.decode(sample.token_ids, skip_special_tokens=True))
        for index, call in enumerate(parsed.tool_calls):
            call.id = f"call_{request.turn}_{index}"
        if not sample.finished:
            finish_reason = "length"
        else:
            finish_reason = "tool_calls" if parsed.tool_calls else "stop"
        return Completion(
            content=parsed.content,
            tool_calls=parsed.tool_calls,
            finish_reason=finish_reason,
            prompt_token_ids=prompt_ids,
            completion_token_ids=list(sample.token_ids),
            completion_logprobs=list(sample.logprobs) if sample.logprobs is not None else None,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(sample.token_ids),
        )

    async def aclose(self) -> None:
        """The sampler's owner manages its resources."""

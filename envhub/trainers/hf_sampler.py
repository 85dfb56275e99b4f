"""Sampling from a Hugging Face causal LM inside the training process.

For CPU demos and tests of the asynchronous loop (``examples/async_grpo_loop.py``): the
rollout engine drives the very model the trainer updates, through
:class:`~envhub.policies.token_policy.TokenPolicy`, with no inference server. Generation
runs in a worker thread under :attr:`HFSampler.lock`; the trainer holds the same lock
while it updates the weights, so no episode samples from half-updated parameters. For
real throughput serve the model with vLLM or SGLang and use the ``openai`` policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from envhub.policies.token_policy import TokenPolicy
from envhub.tokens.sample import Sample

__all__ = ["HFSampler", "transformers_policy"]

# torch's default generator is one per process: a seeded draw reseeds it and restores it on
# exit, so two samplers generating at once in different threads (a held-out evaluation
# beside a training stream) would draw each other's numbers. All generation takes this lock.
_TORCH_RNG = threading.Lock()


class HFSampler:
    """Samples a completion for prompt ids; logprobs are taken from the processed
    (temperature-scaled) distribution each token was drawn from.

    With ``seed``, a sample is a function of the weights, the seed, the prompt and how
    many times that prompt was sampled before, not of the order in which concurrent
    episodes take the lock: a run with many episodes in flight is reproducible (the
    members of a GRPO group share a prompt and draw different samples, whichever of them
    asks first)."""

    def __init__(
        self,
        lm: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> None:
        self.lm = lm
        self.eos = tokenizer.eos_token_id
        self.pad = tokenizer.pad_token_id
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.lock = threading.Lock()
        self.seed = seed
        self._draws: Counter[bytes] = Counter()  # samples taken per prompt (with ``seed``)

    async def __call__(self, prompt_ids: list[int]) -> Sample:
        return await asyncio.to_thread(self._sample, prompt_ids)

    def _sample(self, prompt_ids: list[int]) -> Sample:
        import torch

        with self.lock, _TORCH_RNG, torch.no_grad(), self._seeded(prompt_ids):
            was_training = self.lm.training
            self.lm.eval()
            try:
                out = self.lm.generate(
                    torch.tensor([prompt_ids], device=self.lm.device),
                    attention_mask=torch.ones(
                        (1, len(prompt_ids)), dtype=torch.long, device=self.lm.device
                    ),
                    do_sample=True,
                    temperature=self.temperature,
                    top_p=1.0,
                    top_k=0,
                    max_new_tokens=self.max_new_tokens,
                    eos_token_id=self.eos,
                    pad_token_id=self.pad,
                    return_dict_in_generate=True,
                    output_scores=True,
                )
                scores = self.lm.compute_transition_scores(
                    out.sequences, out.scores, normalize_logits=True
                )[0]
            finally:
                if was_training:
                    self.lm.train()
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = scores.tolist()
        if self.eos in ids:  # generate pads after EOS; the sample ends at EOS
            end = ids.index(self.eos) + 1
            return Sample(ids[:end], logprobs[:end], True)
        return Sample(ids, logprobs, False)

    @contextlib.contextmanager
    def _seeded(self, prompt_ids: list[int]) -> Iterator[None]:
        """Draw from a generator seeded by (seed, prompt, draws of that prompt so far);
        the global torch RNG is left as it was. Called under :attr:`lock`."""
        if self.seed is None:
            yield
            return
        import torch

        prompt = hashlib.blake2b(repr((self.seed, prompt_ids)).encode(), digest_size=16)
        key = prompt.digest()
        draw = self._draws[key]
        self._draws[key] += 1
        prompt.update(draw.to_bytes(8, "little"))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int.from_bytes(prompt.digest()[:8], "little"))
            yield


def transformers_policy(
    lm: Any,
    tokenizer: Any,
    *,
    name: str = "transformers",
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int | None = None,
) -> tuple[TokenPolicy, HFSampler]:
    """A policy sampling from ``lm`` and its sampler (whose ``lock`` a trainer holds
    while it updates ``lm``); ``seed``: see :class:`HFSampler`."""
    sampler = HFSampler(
        lm, tokenizer, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
    )
    sampling = {"temperature": temperature, "top_p": 1.0, "max_tokens": max_new_tokens}
    return TokenPolicy(sampler, tokenizer, name=name, sampling=sampling), sampler

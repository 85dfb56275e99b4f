"""A causal LM over part of its tokenizer's vocabulary, for the tiny CPU model.

The tiny model (:func:`envhub.trainers.tiny.tiny_llama`) has a hidden size of 64 and
SmolLM2's 49,152-token vocabulary: the vocabulary projection is 3.1M of its 3.3M
parameters and nearly all of its compute, in imitation, in GRPO updates and in sampling,
and the untrained tail of the vocabulary is what breaks a sampled tool call's format. A
calc episode uses a few hundred distinct tokens. :class:`CompactVocabLlama` embeds and
predicts only the tokens it is given (any other input id reads as one shared "unknown"
row) and hands every caller logits over the tokenizer's full vocabulary, with
:data:`EXCLUDED_LOGIT` for the tokens it cannot write: token ids stay the tokenizer's
(trajectories, loss masks and recorded logprobs are exactly what a full-vocabulary model
would produce), a sampler never draws an excluded token (its probability underflows to
exactly 0), and logprobs, entropies and losses stay finite.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

__all__ = ["EXCLUDED_LOGIT", "CompactVocabLlama"]

EXCLUDED_LOGIT = -1e4
"""The logit of a token the model cannot write: finite (``0 * logp`` is 0, not NaN, in an
entropy), and far enough below any trained logit that ``exp`` gives exactly 0, also after
division by a sampling temperature."""


class CompactVocabLlama(LlamaForCausalLM):
    """A ``LlamaForCausalLM`` whose embedding and head cover ``vocabulary`` (token ids of
    a tokenizer of ``full_size`` tokens) plus one unknown row; ``config.vocab_size`` is
    the compact size when it is built and ``full_size`` after. ``forward`` takes and
    returns full-vocabulary ids and logits."""

    def __init__(self, config: LlamaConfig, vocabulary: Iterable[int], full_size: int) -> None:
        kept = sorted(set(vocabulary))
        if config.vocab_size != len(kept) + 1:
            raise ValueError(f"config.vocab_size must be {len(kept) + 1} (the vocabulary "
                             f"and the unknown row), not {config.vocab_size}")  # fmt: skip
        super().__init__(config)
        # from here on the model's interface is the full vocabulary's (generation reshapes
        # its scores by config.vocab_size); the compact size lives in the weights' shapes
        config.vocab_size = self.full_size = full_size
        unknown = len(kept)
        compact = torch.full((full_size,), unknown, dtype=torch.long)
        compact[torch.tensor(kept)] = torch.arange(len(kept))
        self.register_buffer("compact_of", compact, persistent=False)
        self.register_buffer("kept", torch.tensor(kept), persistent=False)

    def compact(self, ids: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary ids as rows of the compact embedding (unknown for the rest)."""
        return self.compact_of[ids]

    def full_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Compact logits (without the unknown row, which is never written) spread over the
        full vocabulary."""
        full = logits.new_full((*logits.shape[:-1], self.full_size), EXCLUDED_LOGIT)
        full[..., self.kept] = logits[..., : len(self.kept)]
        return full

    def forward(self, input_ids: Any = None, **kwargs: Any) -> Any:
        if kwargs.get("labels") is not None:
            raise ValueError("CompactVocabLlama computes no loss: take its full-vocabulary "
                             "logits (no caller of the tiny model passes labels)")  # fmt: skip
        if input_ids is not None:
            input_ids = self.compact(input_ids)
        out = super().forward(input_ids=input_ids, **kwargs)
        if out.logits is not None:
            out.logits = self.full_logits(out.logits)
        return out

"""A causal LM over part of its tokenizer's vocabulary, for the tiny CPU model.

The tiny model (:func:`envhub.trainers.tiny.tiny_llama`) has a hidden size of 64 and
SmolLM2's 49,152-token vocabulary: the vocabulary projection is 3.1M of its 3.3M
parameters and nearly all of its compute, in imitation, in GRPO updates and in sampling,
and the untrained tail of the vocabulary is what breaks a sampled tool call's format. A
calc episode uses a few hundred distinct tokens. :class:`CompactVocabLlama` embeds and
predicts only the tokens it is given; any other input id reads as one shared "unknown"
row.

Every interface stays the full vocabulary's, at the module level, so that code which
goes around the model's ``forward`` works too (TRL's fused LM head runs the backbone and
reads the head's ``weight`` and ``bias`` itself):

- the input embedding (:class:`CompactEmbedding`) is looked up by the tokenizer's ids;
- the head (:class:`CompactHead`) returns logits over the whole vocabulary, with
  :data:`EXCLUDED_LOGIT` for the tokens it cannot write, and its ``weight`` and ``bias``
  are those of the equivalent full-vocabulary head (built from the kept rows on each
  read, differentiably).

So token ids, loss masks and recorded logprobs are exactly what a full-vocabulary model
would produce, a sampler never draws an excluded token (its probability underflows to
exactly 0), and logprobs, entropies and losses stay finite.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

__all__ = ["EXCLUDED_LOGIT", "CompactEmbedding", "CompactHead", "CompactVocabLlama"]

EXCLUDED_LOGIT = -1e4
"""The logit of a token the model cannot write: finite (``0 * logp`` is 0, not NaN, in an
entropy), and far enough below any trained logit that ``exp`` gives exactly 0, also after
division by a sampling temperature."""


class CompactEmbedding(nn.Module):
    """``weight`` holds one row per kept id and a last, unknown row; looked up by
    full-vocabulary id."""

    def __init__(self, weight: nn.Parameter, compact_of: torch.Tensor, padding_idx: int | None):
        super().__init__()
        self.weight = weight
        self.padding_idx = padding_idx
        self.register_buffer("compact_of", compact_of, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(self.compact_of[ids], self.weight, self.padding_idx)


class CompactHead(nn.Module):
    """The LM head tied to a :class:`CompactEmbedding`'s rows, speaking the full
    vocabulary (see the module docstring)."""

    def __init__(self, embedding: CompactEmbedding, kept: torch.Tensor, full_size: int) -> None:
        super().__init__()
        object.__setattr__(self, "embedding", embedding)  # tied, not a second submodule
        self.full_size = full_size
        self.register_buffer("kept", kept, persistent=False)
        bias = torch.full((full_size,), EXCLUDED_LOGIT)
        bias[kept] = 0.0
        self.register_buffer("mask", bias, persistent=False)

    def compact_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the compact rows (the unknown row last), for callers that work in
        compact ids (:meth:`CompactVocabLlama.compact`): imitation's cross-entropy."""
        return nn.functional.linear(hidden, self.embedding.weight)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.compact_logits(hidden)  # in autocast's dtype where one is active
        full = logits.new_full((*hidden.shape[:-1], self.full_size), EXCLUDED_LOGIT)
        full[..., self.kept] = logits[..., : len(self.kept)]
        return full

    @property
    def weight(self) -> torch.Tensor:
        """The full-vocabulary head's weight: the kept rows in place, zeros elsewhere
        (where :attr:`bias` excludes the token)."""
        rows = self.embedding.weight[: len(self.kept)]
        full = rows.new_zeros((self.full_size, rows.shape[1]))
        return full.index_copy(0, self.kept, rows)

    @property
    def bias(self) -> torch.Tensor:
        """0 for a kept token, :data:`EXCLUDED_LOGIT` for the rest."""
        return self.mask


class CompactVocabLlama(LlamaForCausalLM):
    """A ``LlamaForCausalLM`` built with ``config.vocab_size`` = the kept ids plus one
    unknown row (HF initialises and ties those weights as for any vocabulary), then given
    a :class:`CompactEmbedding` and a :class:`CompactHead` over them: from then on
    ``config.vocab_size`` is ``full_size`` and every interface is the full vocabulary's."""

    def __init__(self, config: LlamaConfig, vocabulary: Iterable[int], full_size: int) -> None:
        kept = sorted(set(vocabulary))
        if config.vocab_size != len(kept) + 1 or not config.tie_word_embeddings:
            raise ValueError(f"config.vocab_size must be {len(kept) + 1} (the vocabulary and "
                             "the unknown row), with tied embeddings")  # fmt: skip
        super().__init__(config)
        compact = torch.full((full_size,), len(kept), dtype=torch.long)
        compact[torch.tensor(kept)] = torch.arange(len(kept))
        embedding = CompactEmbedding(
            self.model.embed_tokens.weight, compact, self.model.embed_tokens.padding_idx
        )
        self.model.embed_tokens = embedding
        self.lm_head = CompactHead(embedding, torch.tensor(kept), full_size)
        # the head is tied by construction; HF must not tie a full-size "weight" to it
        config.tie_word_embeddings = False
        config.vocab_size = self.vocab_size = full_size

    def compact(self, ids: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary ids as rows of the compact embedding (unknown for the rest)."""
        return self.model.embed_tokens.compact_of[ids]

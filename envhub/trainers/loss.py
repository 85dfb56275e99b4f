"""A reference GRPO policy loss over a :class:`~envhub.trainers.grpo.GRPOBatch` (torch).

This is the minimal trainer step the async loop example runs and the tests check; real
training belongs to TRL, SkyRL or verl. The loss is PPO's clipped surrogate with
per-token advantages, averaged over sampled tokens (DAPO's token-level mean)::

    ratio = exp(logp - old_logp)
    loss  = -sum(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A) * mask) / sum(mask)

``old_logp`` are the behaviour logprobs recorded at sampling time. Where they are
unknown (NaN: retokenized rows) the ratio is taken against the detached current
logprobs, i.e. the plain on-policy policy gradient, instead of a made-up ratio.
"""

from __future__ import annotations

from typing import Any

__all__ = ["policy_loss", "token_logprobs"]


def token_logprobs(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    *,
    temperature: float = 1.0,
    loss_mask: Any = None,
) -> Any:
    """``logp[i, t]`` = log-probability of ``input_ids[i, t]`` given the tokens before it
    (0 at position 0, which nothing predicts), under the distribution sampled at
    ``temperature``: the behaviour logprobs a sampler records (vLLM, ``HFSampler``) are
    of the temperature-scaled distribution, and a ratio against unscaled logprobs would be
    off-policy from the first step (clipped away where it should not be).

    ``loss_mask``: compute only the logprobs of the tokens it selects (the others are 0,
    which :func:`policy_loss` ignores), through the model's ``logits_to_keep``. The
    vocabulary projection of every position is most of a small model's cost (49k tokens
    against a hidden size of 64) and most of a large one's activation memory, while the
    sampled tokens are a fraction of an agent's sequence (tool results and prompts are
    not). Needs a model whose ``forward`` takes a boolean ``logits_to_keep`` (transformers'
    causal LMs since 5.0)."""
    import torch

    if loss_mask is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        picked = _logprobs_of(logits, input_ids[:, 1:], temperature)
        return torch.nn.functional.pad(picked, (1, 0))
    targets = loss_mask.bool().clone()
    targets[:, 0] = False  # nothing predicts the first token
    predictors = torch.nn.functional.pad(targets[:, 1:], (0, 1))  # position t predicts t+1
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=predictors
    ).logits
    logits = logits.reshape(-1, logits.shape[-1])  # one row per kept position
    picked = _logprobs_of(logits, input_ids[targets], temperature)
    full = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    full[targets] = picked
    return full


def _logprobs_of(logits: Any, tokens: Any, temperature: float) -> Any:
    """The log-probability of each of ``tokens`` under its row of ``logits / T``."""
    import torch

    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def policy_loss(logprobs: Any, batch: Any, *, clip_eps: float = 0.2) -> Any:
    """The clipped surrogate loss of ``logprobs`` (from :func:`token_logprobs`)."""
    import torch

    mask = batch.loss_mask.to(logprobs.dtype)
    old = batch.old_logprobs.to(logprobs.dtype)
    old = torch.where(torch.isnan(old), logprobs.detach(), old)
    ratio = torch.exp((logprobs - old) * mask)
    advantages = batch.advantages.to(logprobs.dtype)
    surrogate = torch.minimum(
        ratio * advantages, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages
    )
    return -(surrogate * mask).sum() / mask.sum().clamp(min=1)

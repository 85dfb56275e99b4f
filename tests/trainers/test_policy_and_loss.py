"""The in-process token policy records what the model sampled; the reference loss."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

import envhub
from envhub.policies.base import GenerateRequest
from tests.trainers.conftest import TRAIN_TASKS

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("compact", [False, True], ids=["full-vocabulary", "compact-vocabulary"])
def test_sampled_ids_and_logprobs_match_the_model(
    calc: envhub.LocalEnvironment, tokenizer: Any, compact: bool
) -> None:
    from envhub.trainers.hf_sampler import transformers_policy
    from envhub.trainers.loss import token_logprobs
    from envhub.trainers.tiny import gold_vocabulary, tiny_llama

    vocabulary = gold_vocabulary(tokenizer, calc, TRAIN_TASKS) if compact else None
    model = tiny_llama(tokenizer, vocabulary=vocabulary, seed=3)
    policy, sampler = transformers_policy(model, tokenizer, max_new_tokens=12, temperature=0.5)
    task = calc.tasks.get(TRAIN_TASKS[0])
    request = GenerateRequest(
        messages=task.prompt, tools=calc.tools, turn=0, task_id=task.id, sample_index=0
    )
    completion = asyncio.run(policy.generate(request))
    expected_prompt = tokenizer.apply_chat_template(
        task.prompt, tools=calc.tools, add_generation_prompt=True, return_dict=False
    )
    assert completion.prompt_token_ids == list(expected_prompt)
    ids = completion.completion_token_ids
    assert 0 < len(ids) <= 12 and len(completion.completion_logprobs) == len(ids)
    assert completion.finish_reason in ("stop", "tool_calls", "length")
    # the recorded logprob is the model's, under the temperature the token was drawn with
    sequence = torch.tensor([completion.prompt_token_ids + ids])
    with torch.no_grad():
        logits = model(input_ids=sequence).logits[0, len(expected_prompt) - 1 : -1] / 0.5
    recomputed = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
    assert completion.completion_logprobs == pytest.approx(recomputed.tolist(), abs=1e-3)
    if compact:  # a compact model writes only what it was given
        assert set(ids) <= set(model.lm_head.kept.tolist())
    # the loss's logprobs at the sampling temperature are the behaviour logprobs, so the
    # importance ratio of an on-policy batch is 1 (unscaled, it was off by p_1 / p_0.5)
    full = torch.tensor([completion.prompt_token_ids + ids])
    with torch.no_grad():
        scaled = token_logprobs(model, full, torch.ones_like(full), temperature=0.5)
    assert completion.completion_logprobs == pytest.approx(
        scaled[0, len(expected_prompt) :].tolist(), abs=1e-3
    )
    # and at temperature 1 the reference loss's token_logprobs agree with the sampler's
    policy1, _ = transformers_policy(model, tokenizer, max_new_tokens=8, temperature=1.0)
    c1 = asyncio.run(policy1.generate(request))
    full = torch.tensor([c1.prompt_token_ids + c1.completion_token_ids])
    with torch.no_grad():
        logp = token_logprobs(model, full, torch.ones_like(full))[0, len(expected_prompt) :]
    assert c1.completion_logprobs == pytest.approx(logp.tolist(), abs=1e-3)
    assert not sampler.lock.locked()


def test_a_compact_model_reads_unknown_ids_alike_and_never_writes_them(
    calc: envhub.LocalEnvironment, tokenizer: Any
) -> None:
    from envhub.trainers.compact_vocab import EXCLUDED_LOGIT
    from envhub.trainers.loss import token_logprobs
    from envhub.trainers.tiny import gold_vocabulary, tiny_llama

    vocabulary = gold_vocabulary(tokenizer, calc, TRAIN_TASKS)
    model = tiny_llama(tokenizer, vocabulary=vocabulary, seed=3)
    head = model.get_output_embeddings()
    kept = set(head.kept.tolist())
    assert vocabulary <= kept and len(kept) < len(tokenizer) // 20
    assert model.config.vocab_size == len(tokenizer)  # its interface is the full vocabulary's
    unknown = [i for i in range(len(tokenizer)) if i not in kept][:2]
    prefix = sorted(vocabulary)[:5]
    with torch.no_grad():
        a, b = (model(input_ids=torch.tensor([[*prefix, u]])).logits[0, -1] for u in unknown)
    assert torch.equal(a, b)  # every id outside the vocabulary reads as the one unknown row
    excluded = torch.ones(len(tokenizer), dtype=torch.bool)
    excluded[head.kept] = False
    assert bool((a[excluded] == EXCLUDED_LOGIT).all()) and bool((a[~excluded] > -100).all())
    # the loss's logprobs of kept tokens are finite and those of the rest are never taken
    ids = torch.tensor([[*prefix, *prefix]])
    mask = torch.tensor([[0] * 5 + [1] * 5])
    logp = token_logprobs(model, ids, torch.ones_like(ids), loss_mask=mask)
    assert bool(torch.isfinite(logp).all()) and bool((logp[0, 5:] < 0).all())
    # code that scores with the head's weight and bias itself (TRL's fused LM head) gets
    # the same logits, and its gradient reaches the kept rows
    hidden = model.get_decoder()(input_ids=ids).last_hidden_state
    direct = torch.nn.functional.linear(hidden, head.weight, head.bias)
    assert torch.allclose(direct, head(hidden), atol=1e-5)
    direct[0, -1, prefix[0]].backward()
    grad = model.get_input_embeddings().weight.grad
    assert grad is not None and bool(grad.abs().sum() > 0)
    with torch.no_grad():  # HF's own loss, over the full vocabulary's logits
        assert torch.isfinite(model(input_ids=ids, labels=ids).loss)


def test_policy_loss_is_the_clipped_surrogate() -> None:
    from envhub.trainers.grpo import build_batch
    from envhub.trainers.loss import policy_loss
    from tests.trainers.factories import two_turn

    batch = build_batch([two_turn("g", 0, 1.0), two_turn("g", 1, 0.0)], estimator="dr_grpo")
    # on-policy (logprobs == behaviour logprobs): the loss is -mean advantage per token
    on_policy = policy_loss(batch.old_logprobs.clone(), batch)
    assert on_policy.item() == pytest.approx(0.0, abs=1e-6)  # +0.5 and -0.5 on 5 tokens each
    # a 10x more likely token under the new policy is clipped at 1 + eps for A > 0
    shifted = batch.old_logprobs + math.log(10.0) * batch.loss_mask
    clipped = policy_loss(shifted, batch, clip_eps=0.2)
    assert clipped.item() == pytest.approx(-(0.5 * 1.2 * 5 - 0.5 * 10 * 5) / 10, rel=1e-4)
    # unknown behaviour logprobs (NaN, retokenized rows): ratio 1, gradient still flows
    batch.old_logprobs[:] = float("nan")
    logprobs = torch.zeros_like(batch.old_logprobs, requires_grad=True)
    loss = policy_loss(logprobs, batch)
    loss.backward()
    assert torch.isfinite(loss) and logprobs.grad.abs().sum() > 0


def test_logprobs_of_the_loss_mask_alone_equal_the_full_ones_with_their_gradient(
    tokenizer: Any,
) -> None:
    from envhub.trainers.grpo import build_batch
    from envhub.trainers.loss import policy_loss, token_logprobs
    from envhub.trainers.tiny import tiny_llama
    from tests.trainers.factories import two_turn

    model = tiny_llama(tokenizer, seed=5)
    batch = build_batch([two_turn("g", 0, 1.0), two_turn("g", 1, 0.0)], estimator="dr_grpo")
    batch.attention_mask[1, -1] = 0  # a padded position too
    batch.loss_mask[0, 0] = 1  # a masked-in first token: nothing predicts it
    full = token_logprobs(model, batch.input_ids, batch.attention_mask, temperature=0.7)
    kept = token_logprobs(model, batch.input_ids, batch.attention_mask, temperature=0.7,
                          loss_mask=batch.loss_mask)  # fmt: skip
    selected = batch.loss_mask.bool()
    selected[:, 0] = False
    assert selected.sum() > 0 and (~selected).sum() > 0
    assert torch.equal(kept[selected], full[selected])
    assert torch.count_nonzero(kept[~selected]) == 0
    gradients = []
    for logprobs in (full, kept):
        model.zero_grad()
        policy_loss(logprobs, batch).backward()
        gradients.append([p.grad.clone() for p in model.parameters()])
    for with_all, with_kept in zip(*gradients, strict=True):
        assert torch.allclose(with_all, with_kept, atol=1e-7)
    assert any(g.abs().sum() > 0 for g in gradients[1])


def test_a_seeded_sampler_draws_the_same_samples_in_any_call_order(tokenizer: Any) -> None:
    from envhub.trainers.hf_sampler import HFSampler
    from envhub.trainers.tiny import tiny_llama

    model = tiny_llama(tokenizer, seed=3)
    first, second = tokenizer.encode("Ana has 12 apples."), tokenizer.encode("Ben has 7 books.")

    def draws(order: list[list[int]]) -> list[list[int]]:
        sampler = HFSampler(model, tokenizer, max_new_tokens=6, seed=7)
        return [asyncio.run(sampler(prompt)).token_ids for prompt in order]

    rng_before = torch.random.get_rng_state()
    a_first, a_second, a_first_again = draws([first, second, first])
    b_second, b_first, b_first_again = draws([second, first, first])
    assert (a_first, a_second, a_first_again) == (b_first, b_second, b_first_again)
    assert a_first != a_first_again  # a prompt's next draw is a new sample (GRPO groups)
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # global RNG untouched
    other_seed = HFSampler(model, tokenizer, max_new_tokens=6, seed=8)
    assert asyncio.run(other_seed(first)).token_ids != a_first

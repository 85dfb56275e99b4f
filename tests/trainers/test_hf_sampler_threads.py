"""Two seeded samplers over one model, generating at once in different threads (a held-out
evaluation beside a training stream), draw what each draws alone: torch's generator is
one per process, and a seeded draw reseeds it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("transformers")


def test_concurrent_seeded_samplers_draw_what_they_draw_alone(tokenizer: Any) -> None:
    from envhub.trainers.hf_sampler import HFSampler
    from envhub.trainers.tiny import tiny_llama

    model = tiny_llama(tokenizer, seed=3)
    prompts = [tokenizer.encode(f"question {i}: what is {i} + {i}?") for i in range(6)]

    def sampler(seed: int) -> HFSampler:
        return HFSampler(model, tokenizer, max_new_tokens=24, seed=seed)

    async def draw(s: HFSampler) -> list[list[int]]:
        return [(await s(p)).token_ids for p in prompts]

    async def alongside() -> list[list[int]]:
        mine, _ = await asyncio.gather(draw(sampler(7)), draw(sampler(8)))
        return mine

    alone = asyncio.run(draw(sampler(7)))
    assert asyncio.run(alongside()) == alone

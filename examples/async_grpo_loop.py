"""Asynchronous GRPO: ``envhub.rollout.stream`` feeding a trainer step, on CPU.

    python examples/async_grpo_loop.py --steps 3 --max-staleness 1

Episodes never wait for the trainer: the stream keeps whole GRPO groups running while a
weight update happens, up to ``--max-staleness`` policy versions ahead of the trainer
(AReaL-style bounded staleness). After every update the loop bumps
``rollouts.policy_version``; each turn records the version that sampled it, and the batch
builder carries those versions per token. The model is a tiny Llama that first imitates
a few gold ``calc`` episodes (so that some episodes succeed and GRPO has a signal); the
sampler runs it in the same process, taking a lock the update also takes.

Per step it prints the envhub reward of the batch, the policy versions it was sampled
with, the clipped-surrogate loss (or that there was no update: a batch whose groups all
had equal rewards teaches nothing), and what the batch builder set aside.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks", default="calc-0-00000,calc-0-00001")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-step", type=int, default=2)
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (tiny model)")
    return parser.parse_args()


def update(model: Any, optimizer: Any, batch: Any, sampler: Any) -> float:
    """One clipped-surrogate step on a GRPO batch, holding the sampler's lock."""
    from envhub.trainers.loss import policy_loss, token_logprobs

    with sampler.lock:
        model.train()
        logprobs = token_logprobs(
            model,
            batch.input_ids,
            batch.attention_mask,
            temperature=sampler.temperature,
            loss_mask=batch.loss_mask,
        )
        loss = policy_loss(logprobs, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


async def train(args: argparse.Namespace) -> None:
    import torch

    import envhub
    from envhub.rollout import stream
    from envhub.trainers.grpo import build_batch
    from envhub.trainers.hf_sampler import transformers_policy
    from envhub.trainers.tiny import gold_vocabulary, imitate_gold, smollm2_tokenizer, tiny_llama

    torch.set_num_threads(args.threads)  # tiny matrices: extra threads only spin-wait
    torch.manual_seed(args.seed)
    env = envhub.make("calc", num_tasks=30)
    task_ids = args.tasks.split(",")
    tokenizer = smollm2_tokenizer()
    # the tiny model reads and writes the demonstrations' tokens (and digits, operators)
    model = tiny_llama(tokenizer, vocabulary=gold_vocabulary(tokenizer, env, task_ids),
                       seed=args.seed)
    losses = imitate_gold(model, tokenizer, env, task_ids)
    print(f"imitation warm-up: loss {losses[0]:.2f} -> {losses[-1]:.2f}")
    policy, sampler = transformers_policy(model, tokenizer, max_new_tokens=args.max_new_tokens)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)

    async with stream(
        env,
        policy,
        task_ids,
        group_size=args.group_size,
        batch_size=args.groups_per_step,
        max_staleness=args.max_staleness,
        concurrency=args.group_size * args.groups_per_step,
        sampling=policy.sampling_record,
    ) as rollouts:
        for step in range(args.steps):
            started = time.perf_counter()
            groups = await rollouts.next_batch()
            trajectories = [t for group in groups for t in group.trajectories]
            rewards = [t.reward for t in trajectories if t.reward is not None]
            versions = sorted({v for t in trajectories for v in _versions(t)})
            batch = build_batch(trajectories, tokenizer=tokenizer)
            if len(batch):
                loss = await asyncio.to_thread(update, model, optimizer, batch, sampler)
                rollouts.policy_version += 1  # the stream may now start newer groups
                outcome = f"loss {loss:.4f}"
            else:
                # Every group had equal rewards: no advantage, so no update and no new
                # version; asking for the next batch ends the step all the same.
                outcome = "no update (equal rewards in every group)"
            print(
                f"step {step}: reward {statistics.fmean(rewards):.3f} over {len(trajectories)} "
                f"episodes, sampled by versions {versions}, trainer now at "
                f"v{rollouts.policy_version}, {outcome}, rows {len(batch)}, "
                f"set aside {batch.dropped or '{}'}, {time.perf_counter() - started:.1f}s"
            )


def _versions(trajectory: Any) -> list[int]:
    return [t.policy_version for t in trajectory.turns if t.policy_version is not None]


def main() -> None:
    asyncio.run(train(parse_args()))


if __name__ == "__main__":
    main()

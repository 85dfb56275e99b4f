"""How fast trajectories become padded GRPO tensors (``envhub.trainers.grpo.build_batch``).

    python benchmarks/batch_build.py [--trajectories 256] [--tokens 4096] [--turns 8]

Synthetic trajectories of ``--turns`` turns whose final sequence is ``--tokens`` long
(prompt, then per turn a sampled completion and a tool observation), in GRPO groups of 8
with mixed rewards. Three builders run in the same process on the same data:

- ``tensors``: ``build_batch(return_tensors="pt")`` (one flat tensor per field, scattered
  into the padded shape);
- ``lists``: ``build_batch(return_tensors=None)`` (padded Python lists);
- ``naive``: the baseline a straightforward adapter writes: walk every token of every
  turn, check the prefix token by token, append to per-row lists, then ``torch.tensor``
  each padded row.

Figures are trajectories per second (best of ``--repeat``); ratios are against ``naive``.
CPU-bound and single-threaded: other jobs on the machine lower all three alike.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable

import torch

from envhub.trainers.advantages import compute_advantages
from envhub.trainers.grpo import build_batch
from envhub.trajectory import EnvRef, Trajectory, Turn


def synthetic(count: int, tokens: int, turns: int, seed: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    prompt_len = tokens // 8
    per_turn = (tokens - prompt_len) // turns
    completion_len, observation_len = per_turn * 2 // 3, per_turn - per_turn * 2 // 3
    out = []
    for index in range(count):
        sequence = [rng.randrange(50_000) for _ in range(prompt_len)]
        turn_list = []
        for t in range(turns):
            prompt = list(sequence)
            completion = [rng.randrange(50_000) for _ in range(completion_len)]
            turn_list.append(
                Turn(
                    message_index=2 + 2 * t,
                    latency_s=0.1,
                    policy_version=index % 3,
                    prompt_token_ids=prompt,
                    completion_token_ids=completion,
                    completion_logprobs=[-rng.random() for _ in completion],
                    prefix_ok=t > 0 or None,
                )
            )
            sequence = prompt + completion + [rng.randrange(50_000) for _ in range(observation_len)]
        out.append(
            Trajectory(
                trajectory_id=f"t{index}",
                group_id=f"g{index // 8}",
                task_id=f"task{index // 8}",
                sample_index=index % 8,
                env=EnvRef(name="bench", version="0"),
                model="bench",
                messages=[],
                turns=turn_list,
                reward=float(rng.random() < 0.5) + index % 2,  # never a zero-variance group
            )
        )
    return out


def naive(trajectories: list[Trajectory]) -> dict[str, torch.Tensor]:
    """Per-token loops: what the batch builder is measured against."""
    advantages = compute_advantages(
        [t.reward or 0.0 for t in trajectories], [t.group_id for t in trajectories]
    )
    rows = []
    for trajectory, advantage in zip(trajectories, advantages, strict=True):
        ids: list[int] = []
        mask: list[int] = []
        logps: list[float] = []
        versions: list[int] = []
        for turn in trajectory.turns:
            prompt = turn.prompt_token_ids or []
            for i, token in enumerate(ids):  # prefix check, token by token
                if prompt[i] != token:
                    raise ValueError("drift")
            for token in prompt[len(ids) :]:
                ids.append(token)
                mask.append(0)
                logps.append(0.0)
                versions.append(-1)
            for token, logp in zip(
                turn.completion_token_ids or [], turn.completion_logprobs or [], strict=True
            ):
                ids.append(token)
                mask.append(1)
                logps.append(logp)
                versions.append(turn.policy_version or 0)
        rows.append((ids, mask, logps, versions, [advantage * m for m in mask]))
    length = max(len(r[0]) for r in rows)

    def stack(k: int, fill: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.stack(
            [torch.tensor(r[k] + [fill] * (length - len(r[k])), dtype=dtype) for r in rows]
        )

    return {
        "input_ids": stack(0, 0, torch.long),
        "loss_mask": stack(1, 0, torch.long),
        "old_logprobs": stack(2, 0.0, torch.float32),
        "policy_versions": stack(3, -1, torch.long),
        "advantages": stack(4, 0.0, torch.float32),
    }


def best_rate(fn: Callable[[], object], count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return count / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = synthetic(args.trajectories, args.tokens, args.turns)

    tensors = build_batch(data)
    reference = naive(data)
    for name in ("input_ids", "loss_mask", "policy_versions"):  # same result, or no race
        assert torch.equal(getattr(tensors, name), reference[name]), name
    assert torch.allclose(tensors.advantages, reference["advantages"])

    rates = {
        "naive": best_rate(lambda: naive(data), len(data), args.repeat),
        "lists": best_rate(lambda: build_batch(data, return_tensors=None), len(data), args.repeat),
        "tensors": best_rate(lambda: build_batch(data), len(data), args.repeat),
    }
    one, five, _ = os.getloadavg()
    print(
        f"{args.trajectories} trajectories x {tensors.input_ids.shape[1]} tokens, "
        f"{args.turns} turns; {os.cpu_count()} CPUs, load average {one:.1f}/{five:.1f}"
    )
    for name, rate in rates.items():
        ratio = rate / rates["naive"]
        print(f"{name:>8}: {rate:10.1f} trajectories/s  ({ratio:.2f}x naive)")


if __name__ == "__main__":
    main()

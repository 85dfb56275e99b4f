"""Context compaction's effect on prompt tokens per turn over a 40-turn episode.

Workload: one ``calc`` episode in-process, 40 model calls by the scripted model (a
``calculate`` call each turn; a separate process, ``tests/rollout/scripted_server.py``),
played once without compaction and once with each built-in strategy at ``--compact-at``
(default ``turns:8``) keeping ``--keep`` turns. The prompt of each call is counted in
tokens of SmolLM2's chat template (``envhub.trainers.tiny.smollm2_tokenizer``) rendering
exactly the context the model was fed (the trajectory's segment context up to that
call, with the tools), so the figures are a real tokenizer's, not the scripted server's
stand-in. The summary is the scripted server's fixed reply (one short sentence): a real
model's summary is longer, so ``summarize``'s figures are a lower bound on its prompts.
``calc``'s tool results here are one to three characters, shorter than the placeholder,
so ``drop-tool-outputs`` finds nothing to drop (0 compactions, ratio 1.00); it is for
environments whose tool output dominates the context (files, pages, logs).

Printed: prompt tokens per turn for each arm, then per arm the total over the episode,
the last turn's, the peak, and their ratio to the uncompacted arm.

    .venv/bin/python benchmarks/compaction.py [--turns 40] [--compact-at turns:8] [--keep 2]
"""

from __future__ import annotations

import argparse
from typing import Any

from _scripted_model import load_note, run, scripted_server_process

import envhub
from envhub.policies import make_policy
from envhub.rollout.compaction import STRATEGIES, CompactionConfig
from envhub.rollout.run import run as rollout
from envhub.trainers.token_rows import template_message
from envhub.trajectory import Trajectory

SUMMARY = "I have computed 1 * 7 up to the latest multiple with the calculate tool."


def prompt_tokens(trajectory: Trajectory, tokenizer: Any) -> list[int]:
    """The chat-template token count of each call's prompt: the context it was fed."""
    starts = trajectory.segment_starts()
    counts = []
    for index, turn in enumerate(trajectory.turns):
        segment = sum(1 for s in starts if s <= index) - 1
        context, shift = trajectory.segment_context(segment)
        ids = tokenizer.apply_chat_template(
            [template_message(m) for m in context[: turn.message_index + shift]],
            tools=trajectory.tools, add_generation_prompt=True, tokenize=True,
            return_dict=False,
        )  # fmt: skip
        counts.append(len(ids))
    return counts


async def episode(base_url: str, turns: int, compaction: CompactionConfig | None) -> Trajectory:
    env = envhub.make("calc", num_tasks=2, max_turns=turns)
    policy = make_policy("openai", model="scripted", base_urls=[base_url])
    try:
        result = await rollout(env, policy, "0:1", max_turns=turns, compaction=compaction)
    finally:
        await policy.aclose()
        await env.aclose()
    assert result.trajectories is not None
    [trajectory] = result.trajectories
    assert not trajectory.masked and len(trajectory.turns) == turns, trajectory.error
    return trajectory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--compact-at", default="turns:8")
    parser.add_argument("--keep", type=int, default=2)
    args = parser.parse_args()
    from envhub.trainers.tiny import smollm2_tokenizer

    tokenizer = smollm2_tokenizer()
    arms: dict[str, list[int]] = {}
    compactions: dict[str, int] = {}
    with scripted_server_process("--calc-turns", str(args.turns + 1),
                                 "--reply", SUMMARY) as server:  # fmt: skip
        for name in ["none", *STRATEGIES]:
            config = (
                None if name == "none"
                else CompactionConfig.of(args.compact_at, name, keep=args.keep)
            )  # fmt: skip
            trajectory = run(episode(server.base_url, args.turns, config))
            assert isinstance(trajectory, Trajectory)
            arms[name] = prompt_tokens(trajectory, tokenizer)
            compactions[name] = len(trajectory.compactions or [])

    print(f"compaction: {args.turns}-turn calc episode, compact at {args.compact_at}, "
          f"keep {args.keep}; prompt tokens per call (SmolLM2 chat template); "
          f"{load_note()}")  # fmt: skip
    names = list(arms)
    print("turn  " + "  ".join(f"{n:>17}" for n in names))
    for turn in range(args.turns):
        print(f"{turn + 1:>4}  " + "  ".join(f"{arms[n][turn]:>17}" for n in names))
    base = arms["none"]
    print(f"\n{'arm':<18}{'compactions':>12}{'total':>9}{'last':>7}{'peak':>7}"
          f"{'total/none':>12}{'last/none':>11}{'peak/none':>11}")  # fmt: skip
    for name, counts in arms.items():
        print(f"{name:<18}{compactions[name]:>12}{sum(counts):>9}{counts[-1]:>7}"
              f"{max(counts):>7}{sum(counts) / sum(base):>12.2f}"
              f"{counts[-1] / base[-1]:>11.2f}{max(counts) / max(base):>11.2f}")  # fmt: skip


if __name__ == "__main__":
    main()

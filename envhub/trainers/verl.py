"""verl: envhub episodes as verl agent-loop outputs.

verl's agent loops (``AgentLoopBase.run``) return one ``AgentLoopOutput`` per prompt:
``prompt_ids``, ``response_ids`` (model and tool tokens after the prompt),
``response_mask`` (1 on model tokens, 0 on tool/template tokens), ``response_logprobs``,
``reward_score``, ``num_turns`` and ``extra_fields``. :func:`agent_loop_output` converts
an envhub :class:`~envhub.trajectory.Trajectory` into exactly those fields, from the
token ids the server sampled; :func:`verl_sampler` lets envhub's episode runner generate
through verl's server manager (token in, token out). ``EnvhubAgentLoop`` (in
:mod:`envhub.trainers.verl_loop`, which imports verl) joins the two; register it in
verl's agent-loop config (see ``examples/verl/envhub_agent_loop.yaml``)::

    - name: envhub
      _target_: envhub.trainers.verl_loop.EnvhubAgentLoop
      env: calc            # plugin name, or an envhub serve URL plus env_name
      max_turns: 8

verl keeps one row per trajectory, so a trajectory whose chat template re-rendered
earlier turns differently (token drift) is kept with ``response_mask`` all 0 and
``extra_fields["envhub_mask_reason"] = "token_drift"``; masked trajectories (infra
failures) get ``reward_score=None`` and ``extra_fields["envhub_masked"] = True`` and
should be filtered before advantage estimation rather than scored 0.

Context compaction (:mod:`envhub.rollout.compaction`): a compacted trajectory is one
output per context segment (:func:`agent_loop_outputs`), each with the segment's prompt
(the compacted context it started from) and its turns' sampled spans in the response;
``extra_fields["envhub_segment"]`` numbers them and ``envhub_segments`` counts them,
and all carry the trajectory's reward. :func:`agent_loop_output` (one output, verl's
agent loop) refuses a compacted trajectory.

Per-token policy versions: ``extra_fields["envhub_policy_versions"]`` has one entry per
``response_ids`` token, the version that sampled it (a turn split by a mid-rollout weight
update carries several, :attr:`~envhub.trajectory.Turn.completion_versions`) and ``-1``
where ``response_mask`` is 0 (tool results, template glue, drifted or masked rows) or no
version was recorded. verl has no per-token version field of its own (its
``min_global_steps``/``max_global_steps`` are per trajectory), and it turns every
``extra_fields`` key into a ``non_tensor_batch`` entry, so the list reaches the trainer
unpadded, aligned with the first ``len`` positions of ``responses``: an off-policy
correction can weight each token by its own version's importance ratio.

Trees: ``extra_fields`` always carries ``envhub_tree_id``, ``envhub_parent_id`` and
``envhub_branch_turn`` (``None`` outside a tree rollout). :func:`agent_loop_outputs` with
``tree="treerl"`` converts the leaves of tree rollouts with per-node advantages
(:mod:`envhub.trainers.tree_advantages`): ``extra_fields["envhub_token_advantages"]``, one
per ``response_ids`` token (0 where ``response_mask`` is 0; ``None`` for a trajectory
whose group holds no tree), and a ``response_mask`` that leaves a child's shared turns
untrained (they move into its ``prompt_ids``; its parent's row trains them). verl's
advantage estimators compute one advantage per trajectory from ``reward_score`` within a
``uid`` group (the flat baseline), and a registered estimator (``register_adv_est``)
receives tensors only, never ``non_tensor_batch``: per-node advantages reach verl's loss
only through a trainer that copies ``envhub_token_advantages`` into
``batch["advantages"]``. With verl's own estimators, convert without ``tree`` (every leaf
trained whole). ``EnvhubAgentLoop`` plays one episode per prompt; tree rollouts come from
``envhub.rollout.run(tree=...)`` or the stream.

Turn-level rewards (:meth:`envhub.Environment.turn_reward`): ``extra_fields["turn_scores"]``
(verl's own per-turn field, which its tool agent loop fills from an interaction) holds
the environment's reward of each turn, 0.0 for a turn without one, and ``[]`` when the
environment gave none. With ``gamma``, ``extra_fields`` also carries
``envhub_token_rewards`` and ``envhub_returns``, one per ``response_ids`` token (0 where
``response_mask`` is 0; ``None`` for a masked trajectory): each turn's reward on the last
token it sampled (the final reward added at the last turn's: verl's
``token_level_rewards`` form) and each turn's discounted return on every token it
sampled (:mod:`envhub.trainers.turn_rewards`). ``reward_score`` stays the episode's
reward, so verl's own estimators are unchanged; a trainer copies ``envhub_token_rewards``
into ``token_level_rewards`` (e.g. for GAE) to train on the turns' rewards. A compacted
trajectory's output carries its own segment's turns in all three (the final reward on
the last segment's; a return still counts the later segments' rewards).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from envhub.errors import InvalidRequest
from envhub.tokens.sample import Sample, Sampler
from envhub.trainers.token_rows import TokenRow, trajectory_rows
from envhub.trainers.tree_advantages import (
    TreeEstimator,
    batch_turn_advantages,
    broken_trees,
    row_token_advantages,
)
from envhub.trainers.turn_rewards import TurnValues, check_gamma
from envhub.trajectory import Trajectory

__all__ = ["agent_loop_output", "agent_loop_outputs", "verl_sampler"]


def agent_loop_output(
    trajectory: Trajectory,
    *,
    response_length: int | None = None,
    turn_advantages: Sequence[float] | None = None,
    untrained: bool = False,
    gamma: float | None = None,
) -> dict[str, Any]:
    """The ``AgentLoopOutput`` fields of one trajectory (``metrics`` excepted).

    ``response_length`` (verl's ``rollout.response_length``) cuts the response fields
    (``envhub_policy_versions`` included), and records ``envhub_truncated`` in
    ``extra_fields``. The versions are the token row's
    (:attr:`~envhub.trainers.token_rows.TokenRow.policy_versions`) after the prompt, so they
    stay aligned with ``response_ids`` token for token. ``turn_advantages`` (a tree
    member's, :func:`~envhub.trainers.tree_advantages.turn_advantages`) masks its shared
    turns and adds ``envhub_token_advantages``; ``untrained`` sets ``response_mask`` all 0
    (a member of a tree that is not trained on). ``gamma`` adds the per-token turn
    rewards and discounted returns (module docstring).
    """
    if gamma is not None:
        gamma = check_gamma(gamma)
    outputs = _outputs(trajectory, response_length, turn_advantages, untrained, gamma)
    if len(outputs) > 1:
        raise InvalidRequest(
            f"trajectory {trajectory.trajectory_id} was compacted into {len(outputs)} "
            "segments, one output each: convert it with agent_loop_outputs"
        )
    return outputs[0]


def _outputs(
    trajectory: Trajectory,
    response_length: int | None,
    turn_advantages: Sequence[float] | None,
    untrained: bool,
    gamma: float | None,
) -> list[dict[str, Any]]:
    """The outputs of one trajectory: one per context segment (module docstring), each
    with its segment's turn values when ``gamma`` is given."""
    rows = trajectory_rows(trajectory, drift="mask", mask_shared_prefix=turn_advantages is not None)
    values = TurnValues.of(trajectory, gamma) if gamma is not None else None
    return [
        _row_output(
            trajectory, row, len(rows), response_length, turn_advantages, untrained, values
        )
        for row in rows
    ]


def _row_output(
    trajectory: Trajectory,
    row: TokenRow,
    segments: int,
    response_length: int | None,
    turn_advantages: Sequence[float] | None,
    untrained: bool,
    values: TurnValues | None,
) -> dict[str, Any]:
    """One segment's output (``values``: the trajectory's turn values, with ``gamma``)."""
    cut = row.prompt_length
    prompt_ids = row.input_ids[:cut]
    response_ids = row.input_ids[cut:]
    if row.mask_reason is None and not untrained:
        response_mask = row.loss_mask[cut:]
    else:
        response_mask = [0] * len(response_ids)
    advantages = None
    if turn_advantages is not None:
        per_token = row_token_advantages(row, turn_advantages)[cut:]
        advantages = [a * m for a, m in zip(per_token, response_mask, strict=True)]
    policy_versions = row.policy_versions[cut:]  # NOT_SAMPLED (-1) where the mask is 0
    has_logprobs = all(turn.completion_logprobs is not None for turn in trajectory.turns)
    response_logprobs = row.old_logprobs[cut:] if has_logprobs and trajectory.turns else None
    truncated = response_length is not None and len(response_ids) > response_length
    if truncated:
        response_ids = response_ids[:response_length]
        response_mask = response_mask[:response_length]
        policy_versions = policy_versions[:response_length]
        if advantages is not None:
            advantages = advantages[:response_length]
        if response_logprobs is not None:
            response_logprobs = response_logprobs[:response_length]
    extra: dict[str, Any] = {
        "envhub_tree_id": trajectory.tree_id,
        "envhub_parent_id": trajectory.parent_id,
        "envhub_branch_turn": trajectory.branch_turn,
    }
    if turn_advantages is not None:
        extra["envhub_token_advantages"] = advantages
    if values is not None:
        rewards, returns = values.on_response(row, response_mask)
        extra["envhub_token_rewards"], extra["envhub_returns"] = rewards, returns
    return {
        "prompt_ids": prompt_ids,
        "response_ids": response_ids,
        "response_mask": response_mask,
        "response_logprobs": response_logprobs,
        "reward_score": None if trajectory.masked else trajectory.reward,
        "num_turns": sum(1 for m in trajectory.messages if m.get("role") != "system"),
        "extra_fields": {
            "envhub_trajectory_id": trajectory.trajectory_id,
            "envhub_group_id": trajectory.group_id,
            "envhub_task_id": trajectory.task_id,
            "envhub_stop_reason": trajectory.stop_reason,
            "envhub_masked": trajectory.masked,
            "envhub_mask_reason": row.mask_reason,
            "envhub_truncated": truncated,
            "envhub_policy_versions": policy_versions,
            "envhub_segment": row.segment,
            "envhub_segments": segments,
            "envhub_reward_components": dict(trajectory.reward_components),
            "turn_scores": _turn_scores(trajectory, row),
            "tool_rewards": [],
            **extra,
        },
    }


def _turn_scores(trajectory: Trajectory, row: TokenRow) -> list[float]:
    """verl's ``turn_scores``: the environment's reward of each turn (0.0 for a turn
    without one) of the row's context segment (every turn without compaction, or for a
    drifted row: the trajectory's only one), or ``[]`` when the environment gave none (as
    verl's own loop without an interaction)."""
    if all(turn.reward is None for turn in trajectory.turns):
        return []
    turns = len(trajectory.turns)
    indexes = trajectory.segment_turns(row.spans[0][0]) if row.spans else range(turns)
    return [trajectory.turns[t].reward or 0.0 for t in indexes]


def agent_loop_outputs(
    trajectories: Sequence[Trajectory],
    *,
    tree: TreeEstimator | None = None,
    response_length: int | None = None,
    gamma: float | None = None,
) -> list[dict[str, Any]]:
    """:func:`agent_loop_output` of each trajectory, or of each context segment of a
    compacted one (module docstring), in order; with ``tree``, the members of tree
    groups get per-node advantages and shared turns masked, a tree with a masked or
    missing leaf gets ``response_mask`` all 0 (as ``build_batch`` drops it), and every
    output carries ``envhub_token_advantages`` (``None`` outside tree groups)."""
    if gamma is not None:
        gamma = check_gamma(gamma)
    if tree is None:
        return [
            o for t in trajectories for o in _outputs(t, response_length, None, False, gamma)
        ]
    per_turn = batch_turn_advantages(trajectories, tree)
    broken = broken_trees(trajectories)
    outputs = []
    for t in trajectories:
        for output in _outputs(
            t,
            response_length,
            per_turn.get(t.trajectory_id),
            (t.tree_id or "") in broken,
            gamma,
        ):
            output["extra_fields"].setdefault("envhub_token_advantages", None)
            outputs.append(output)
    return outputs


def verl_sampler(
    server_manager: Any,
    sampling_params: dict[str, Any],
    *,
    request_id: str,
    eos_token_ids: Collection[int],
) -> Sampler:
    """A sampler over verl's ``server_manager.generate`` (``TokenOutput``: ``token_ids``,
    ``log_probs``, ``stop_reason``). All turns of an episode share ``request_id``, which
    verl uses for sticky routing (prefix-cache hits on the same server)."""

    async def sample(prompt_ids: list[int]) -> Sample:
        output = await server_manager.generate(
            request_id=request_id, prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        ids = list(output.token_ids)
        finished = output.stop_reason != "aborted" and bool(ids) and ids[-1] in eos_token_ids
        return Sample(ids, list(output.log_probs) if output.log_probs else None, finished)

    return sample

"""TRL ``rollout_func``: envhub episodes against an OpenAI-compatible server.

The inference server (vLLM with ``return_token_ids``, SGLang, ...) generates; envhub's
episode runner plays whole episodes against it, and TRL gets the token ids the server
sampled, ``env_mask`` = 1 exactly on sampled tokens and the sampled logprobs, never
re-tokenized text. Use with ``reward_funcs=envhub_reward`` (:mod:`envhub.trainers.trl`).

Each sample also carries ``policy_versions``: per completion token, the policy version
that sampled it (several within one turn when a mid-rollout weight update split it,
:attr:`~envhub.trajectory.Turn.completion_versions`), ``-1`` where ``env_mask`` is 0.
TRL's own loss ignores it (its importance correction uses ``logprobs`` only); like every
key beyond ``prompt_ids``/``completion_ids``/``logprobs`` TRL keeps it per sample and
passes it to the reward functions as a keyword (``envhub_reward`` accepts and ignores
it), so a trainer subclass can weight each token by its own version's importance ratio.

Context compaction (:mod:`envhub.rollout.compaction`): :meth:`EnvhubRollout.to_trl`
gives a compacted trajectory one sample per context segment (``segment`` numbers them,
each carries the trajectory's ``env_reward`` and ``trajectory_id``), its ``prompt_ids``
the compacted context the segment started from and ``env_mask`` 1 on that segment's
sampled tokens only. TRL's ``GRPOTrainer`` wants exactly ``num_generations`` samples per
prompt, so :class:`EnvhubRollout` itself does not compact; segments are for a trainer
that groups samples by ``trajectory_id`` (trajectories from ``envhub.rollout.run``).

Trees (:meth:`EnvhubRollout.to_trl` with ``tree="treerl"``, for tree rollouts' leaves):
each sample also carries ``tree_id``, ``parent_id``, ``branch_turn`` and
``token_advantages``, the per-node advantages of :mod:`envhub.trainers.tree_advantages`
per ``completion_ids`` token (0 where ``env_mask`` is 0), and ``env_mask`` leaves the
turns a child shares with its parent untrained (they are in its ``prompt_ids``: trained
once, in the parent's sample). TRL cannot take them as they are: ``GRPOTrainer`` computes
one advantage per sample from the rewards (``_generate_and_score_completions``), and only
its loss (``_compute_loss``) accepts per-token advantages of shape ``(B, T)``, for
subclasses; a subclass that pads ``token_advantages`` into ``advantages`` trains on
trees, TRL's own advantages are the flat baseline (use ``to_trl`` without ``tree`` then:
every leaf trained whole). A tree with a masked leaf gets ``env_mask`` all 0, as
:func:`~envhub.trainers.grpo.build_batch` drops it. ``EnvhubRollout`` itself samples one
episode per prompt: TRL needs exactly ``num_generations`` samples per prompt, which a tree
(whose episodes may end before a branch point) does not guarantee, so tree rollouts come
from ``envhub.rollout.run(tree=...)`` or the stream.

Turn-level rewards (``EnvhubRollout(gamma=...)``, or :meth:`EnvhubRollout.to_trl` with
``gamma``): each sample also carries ``token_rewards`` and ``returns``, one per
``completion_ids`` token (0 where ``env_mask`` is 0; ``None`` for a masked episode):
each turn's reward on the last token it sampled
(the final reward added at the last turn's) and each turn's discounted return on every
token it sampled (:mod:`envhub.trainers.turn_rewards`). TRL's own advantages use
``env_reward`` only; a trainer subclass that turns ``returns`` into per-token advantages
trains on them. A compacted trajectory's samples carry their own segment's turns (the
final reward on the last segment's; a return still counts the later segments' rewards).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from envhub.errors import InvalidRequest
from envhub.protocol import EnvironmentClient
from envhub.runtime.sync import run_sync
from envhub.trainers.token_rows import NOT_SAMPLED, TokenRow, trajectory_rows
from envhub.trainers.tree_advantages import (
    TreeEstimator,
    batch_turn_advantages,
    broken_trees,
    row_token_advantages,
)
from envhub.trainers.turn_rewards import TurnValues, check_gamma
from envhub.trajectory import Trajectory
from envhub.types import Message

__all__ = ["EnvhubRollout", "trl_sample"]


def _prompt_key(messages: Sequence[Any]) -> str:
    return json.dumps([(m.get("role"), m.get("content") or "") for m in messages])


def trl_sample(row: TokenRow, eos_token_id: int) -> dict[str, Any]:
    """One TRL rollout sample from a token row: the sequence split at the first sampled
    token, ``env_mask`` 1 exactly on sampled tokens, logprobs 0.0 on the others.

    A row with a ``mask_reason`` keeps its tokens but gets ``env_mask`` all 0; an empty
    completion becomes one EOS token with mask 0 (TRL needs at least one token).
    ``policy_versions`` is the row's (:attr:`~envhub.trainers.token_rows.TokenRow.policy_versions`)
    after the prompt, one per ``completion_ids`` token: the version that sampled it, ``-1``
    on tokens the policy did not sample (and on the EOS stand-in).
    """
    cut = row.prompt_length
    prompt_ids = row.input_ids[:cut] or [eos_token_id]
    completion_ids = row.input_ids[cut:]
    if row.mask_reason is not None:
        env_mask = [0] * len(completion_ids)
    else:
        env_mask = row.loss_mask[cut:]
    logprobs = row.old_logprobs[cut:]
    versions = row.policy_versions[cut:]
    if not completion_ids:
        completion_ids, env_mask, logprobs, versions = [eos_token_id], [0], [0.0], [NOT_SAMPLED]
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": logprobs,
        "env_mask": env_mask,
        "policy_versions": versions,
    }


async def _prompt_index(env: EnvironmentClient) -> dict[str, str]:
    """Task id by prompt (the first task of any prompt two tasks share)."""
    index: dict[str, str] = {}
    for task_id in await env.task_ids(None):
        task = await env.task(task_id)
        index.setdefault(_prompt_key(task.prompt), task.id)
    return index


def _sampling_record(policy: Any) -> dict[str, Any]:
    sampling: Any = getattr(policy, "sampling", None)
    return sampling.to_request() if hasattr(sampling, "to_request") else {}


class EnvhubRollout:
    """A TRL ``rollout_func``: envhub episodes against an OpenAI-compatible server.

    TRL hands it the prompts of one generation batch, each repeated ``num_generations``
    times in a row; every prompt is mapped back to its task (by its messages), each run of
    ``num_generations`` becomes one GRPO group, and the episodes run concurrently through
    :class:`~envhub.rollout.episode.EpisodeRunner`. ``policy_version`` is the trainer's
    ``global_step``. Returns the sampled ids, ``env_mask``, ``logprobs`` and
    ``policy_versions`` per sample plus ``env_reward`` (for :func:`envhub_reward`) and
    ``trajectory_id``; the trajectories of the last call are kept in
    :attr:`last_trajectories` (and appended to ``output``). ``gamma`` adds the per-token
    ``token_rewards`` and ``returns`` of turn-level rewards (module docstring).
    """

    def __init__(
        self,
        env: EnvironmentClient,
        *,
        policy: Any = None,
        model: str | None = None,
        base_urls: Sequence[str] = (),
        sampling: Any = None,
        concurrency: int = 64,
        max_turns: int | None = None,
        eos_token_id: int | None = None,
        output: str | None = None,
        task_for_prompt: Callable[[list[Message]], str] | None = None,
        gamma: float | None = None,
    ) -> None:
        self.env = env
        self._policy = policy
        self._owns_policy = False
        self._policy_args = (model, list(base_urls), sampling)
        self.concurrency = concurrency
        self.max_turns = max_turns
        self.eos_token_id = eos_token_id
        self.output = output
        self.last_trajectories: list[Trajectory] = []
        self.gamma = None if gamma is None else check_gamma(gamma)
        self._task_for_prompt = task_for_prompt or self._index_tasks()

    def _index_tasks(self) -> Callable[[list[Message]], str]:
        try:
            index = run_sync(_prompt_index(self.env))
        except NotImplementedError:
            raise InvalidRequest(
                "mapping prompts back to tasks needs an environment whose transport gives "
                "whole tasks (in-process); for a remote one pass task_for_prompt="
            ) from None

        def lookup(messages: list[Message]) -> str:
            try:
                return index[_prompt_key(messages)]
            except KeyError:
                raise InvalidRequest(
                    "a prompt matches no task of the environment; build the dataset with "
                    "envhub.trainers.trl.task_dataset(...)"
                ) from None

        return lookup

    def policy(self) -> Any:
        if self._policy is None:
            from envhub.policies import make_policy

            model, urls, sampling = self._policy_args
            self._policy = make_policy("openai", model=model, base_urls=urls, sampling=sampling)
            self._owns_policy = True
        return self._policy

    def close(self) -> None:
        """Close the policy's HTTP connections (when this object created the policy)."""
        if self._owns_policy and self._policy is not None:
            run_sync(self._policy.aclose())
            self._policy, self._owns_policy = None, False

    def __enter__(self) -> EnvhubRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        generations = (
            trainer.num_generations if trainer.model.training else (trainer.num_generations_eval)
        )
        step = trainer.state.global_step
        trajectories = run_sync(self.run(prompts, generations, step))
        eos = self.eos_token_id
        if eos is None:
            eos = trainer.processing_class.eos_token_id
        return self.to_trl(trajectories, eos, gamma=self.gamma)

    async def run(
        self, prompts: list[Any], num_generations: int, policy_version: int
    ) -> list[Trajectory]:
        """Run one episode per prompt; returns trajectories in prompt order."""
        from envhub.rollout.dispatcher import dispatch
        from envhub.rollout.episode import EpisodeRunner, EpisodeSpec

        specs = []
        for index, prompt in enumerate(prompts):
            task_id = self._task_for_prompt(prompt)
            group = f"{task_id}#v{policy_version}:{index // num_generations}"
            specs.append(EpisodeSpec(task_id, index % num_generations, group))
        policy = self.policy()
        runner = EpisodeRunner(
            self.env,
            policy,
            sampling=_sampling_record(policy),
            max_turns=self.max_turns,
            policy_version=lambda: policy_version,
        )
        results: dict[tuple[str, int, str], Trajectory] = {}

        def keep(trajectory: Trajectory) -> None:
            results[(trajectory.task_id, trajectory.sample_index, trajectory.group_id)] = trajectory

        await dispatch(runner, specs, concurrency=self.concurrency, on_result=keep)
        ordered = [results[(s.task_id, s.sample_index, s.group_id)] for s in specs]
        self.last_trajectories = ordered
        if self.output:
            from envhub.trajectory import TrajectoryWriter

            with TrajectoryWriter(self.output) as writer:
                for trajectory in ordered:
                    writer.write(trajectory)
        return ordered

    def to_trl(
        self,
        trajectories: Sequence[Trajectory],
        eos_token_id: int,
        *,
        tree: TreeEstimator | None = None,
        gamma: float | None = None,
    ) -> dict[str, list[Any]]:
        """The ``rollout_func`` output for trajectories (one sample each, in order; one
        per context segment of a compacted one, numbered by ``segment``); ``tree`` adds
        the tree fields and per-token advantages, ``gamma`` the per-token turn rewards and
        discounted returns (module docstring)."""
        keys = ["prompt_ids", "completion_ids", "logprobs", "env_mask", "policy_versions",
                "env_reward", "trajectory_id", "segment"]  # fmt: skip
        if tree is not None:
            keys += ["tree_id", "parent_id", "branch_turn", "token_advantages"]
        if gamma is not None:
            gamma = check_gamma(gamma)
            keys += ["token_rewards", "returns"]
        out: dict[str, list[Any]] = {key: [] for key in keys}
        per_turn = batch_turn_advantages(trajectories, tree) if tree is not None else {}
        broken = broken_trees(trajectories) if tree is not None else {}
        for trajectory in trajectories:
            # TRL takes one sample per prompt: a drifted trajectory cannot be split into
            # rows, so its tokens are masked (its reward still counts in the group)
            # (a compacted one: one sample per context segment, module docstring)
            turns = per_turn.get(trajectory.trajectory_id)
            values = TurnValues.of(trajectory, gamma) if gamma is not None else None
            for row in trajectory_rows(
                trajectory, drift="mask", mask_shared_prefix=turns is not None
            ):
                sample = trl_sample(row, eos_token_id)
                if (trajectory.tree_id or "") in broken:
                    sample["env_mask"] = [0] * len(sample["env_mask"])
                for key, value in sample.items():
                    out[key].append(value)
                out["env_reward"].append(None if trajectory.masked else trajectory.reward)
                out["trajectory_id"].append(trajectory.trajectory_id)
                out["segment"].append(row.segment)
                if tree is not None:
                    out["tree_id"].append(trajectory.tree_id)
                    out["parent_id"].append(trajectory.parent_id)
                    out["branch_turn"].append(trajectory.branch_turn)
                    out["token_advantages"].append(_completion_advantages(row, turns, sample))
                if values is not None:
                    rewards, returns = values.on_response(row, sample["env_mask"])
                    out["token_rewards"].append(rewards)
                    out["returns"].append(returns)
        return out


def _completion_advantages(
    row: TokenRow, turns: list[float] | None, sample: dict[str, Any]
) -> list[float] | None:
    """Per ``completion_ids`` token, its node's advantage where ``env_mask`` is 1;
    ``None`` for a trajectory outside any tree group (TRL's flat baseline applies)."""
    if turns is None:
        return None
    advantages = row_token_advantages(row, turns)[row.prompt_length :]
    if len(advantages) != len(sample["completion_ids"]):  # the EOS stand-in
        advantages = [0.0] * len(sample["completion_ids"])
    return [a * m for a, m in zip(advantages, sample["env_mask"], strict=True)]

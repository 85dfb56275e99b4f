"""Trainer adapters: envhub trajectories and sessions as GRPO training data.

- :mod:`envhub.trainers.grpo`: advantage estimators and the trainer-agnostic batch
  builder (token ids, masks, logprobs, advantages, policy versions, padding);
- :mod:`envhub.trainers.tree_advantages`: TreeRL's per-node advantages for tree rollouts;
- :mod:`envhub.trainers.turn_rewards`: turn-level rewards and discounted returns per turn;
- :mod:`envhub.trainers.trl`: TRL ``GRPOTrainer`` (``environment_factory``,
  ``rollout_func``, ``envhub_reward``);
- :mod:`envhub.trainers.skyrl`: a ``skyrl-gym`` text environment over an envhub session;
- :mod:`envhub.trainers.verl`: a verl agent loop and its output conversion.

Importing this package loads none of torch, transformers, TRL, skyrl-gym or verl; the
names below resolve to their module on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "GRPOBatch": "envhub.trainers.grpo",
    "build_batch": "envhub.trainers.grpo",
    "compute_advantages": "envhub.trainers.advantages",
    "group_advantages": "envhub.trainers.advantages",
    "task_normalize": "envhub.trainers.advantages",
    "TokenRow": "envhub.trainers.token_rows",
    "tree_nodes": "envhub.trainers.tree_advantages",
    "trajectory_rows": "envhub.trainers.token_rows",
    "turn_returns": "envhub.trainers.turn_rewards",
    "environment_factory": "envhub.trainers.trl",
    "envhub_reward": "envhub.trainers.trl",
    "task_dataset": "envhub.trainers.trl",
    "EnvhubRollout": "envhub.trainers.trl_rollout",
    "EnvhubSkyRLEnv": "envhub.trainers.skyrl",
    "EnvhubAgentLoop": "envhub.trainers.verl_loop",
    "agent_loop_output": "envhub.trainers.verl",
    "agent_loop_outputs": "envhub.trainers.verl",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envhub.trainers' has no attribute {name!r}")

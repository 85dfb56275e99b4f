"""Turn-level rewards for training: per-turn rewards, discounted returns, and their place
on a row's tokens.

An environment may reward each turn (:meth:`envhub.Environment.turn_reward`, recorded as
:attr:`envhub.trajectory.Turn.reward`) besides the episode (``Trajectory.reward``). For a
scored trajectory with turns ``0 .. T-1``, per-turn rewards ``r_t`` (0 where a turn has
none) and final reward ``R``::

    reward_t = r_t                      for t < T-1
    reward_t = r_t + R                  for t = T-1      (the final reward at the last turn)
    return_t = reward_t + gamma * return_{t+1},  return_T = 0

so ``return_t = sum_{k>=t} gamma^(k-t) * reward_k``: with ``gamma=1`` every turn's return
is what the episode still earns from it, and without per-turn rewards every turn's return
is ``gamma^(T-1-t) * R`` (``R`` itself when ``gamma=1``: the episode reward, as before).

On a token row (:class:`~envhub.trainers.token_rows.TokenRow`) a turn's values sit on the
tokens it sampled (its span): :func:`row_token_rewards` puts ``reward_t`` on the *last*
sampled token of turn ``t`` (0 on every other token, the convention of verl's
``token_level_rewards`` and SkyRL's per-token rewards: a row's token rewards sum to its
turns' rewards), and :func:`~envhub.trainers.tree_advantages.row_token_advantages` puts
``return_t`` on *every* token of turn ``t``'s span (a per-token value an advantage can be
made from). A turn the row does not train (a gold prefix, a tree child's shared turns)
has no span there, so its values are on no token of that row.

A compacted trajectory (:mod:`envhub.rollout.compaction`) has one row per context
segment; a row's spans index the trajectory's turns, so each segment's row carries its
own turns' values (the final reward on the last segment's), and a turn's return still
counts the rewards of the segments after it: compaction changes what the model saw, not
what the episode earned.

Masked trajectories have no final reward and are never trained on; asking for their
returns raises :class:`~envhub.errors.InvalidRequest` (every adapter drops or zeroes them
first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from envhub.errors import InvalidRequest
from envhub.trainers.token_rows import TokenRow
from envhub.trainers.tree_advantages import row_token_advantages
from envhub.trajectory import Trajectory

__all__ = ["TurnValues", "check_gamma", "row_token_rewards", "turn_returns", "turn_rewards"]


def check_gamma(gamma: float) -> float:
    """``gamma`` if it is a discount factor (a finite number in [0, 1]), else
    :class:`~envhub.errors.InvalidRequest`."""
    if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not 0 <= gamma <= 1:
        raise InvalidRequest(f"gamma must be a number in [0, 1], got {gamma!r}")
    return float(gamma)


def turn_rewards(trajectory: Trajectory) -> list[float]:
    """``reward_t`` of each turn (module docstring): the turn's own reward (0 without
    one), the final reward added at the last turn."""
    if trajectory.masked or trajectory.reward is None:
        raise InvalidRequest(
            f"trajectory {trajectory.trajectory_id} is masked: it has no rewards to train on"
        )
    rewards = [turn.reward or 0.0 for turn in trajectory.turns]
    if rewards:
        rewards[-1] += trajectory.reward
    return rewards


def turn_returns(trajectory: Trajectory, gamma: float = 1.0) -> list[float]:
    """The discounted return of each turn: ``return_t = reward_t + gamma * return_{t+1}``
    (module docstring)."""
    gamma = check_gamma(gamma)
    returns = turn_rewards(trajectory)
    for t in range(len(returns) - 2, -1, -1):
        returns[t] += gamma * returns[t + 1]
    if not all(math.isfinite(value) for value in returns):  # a huge reward overflowed
        raise InvalidRequest(f"trajectory {trajectory.trajectory_id}: its returns overflow")
    return returns


def row_token_rewards(row: TokenRow, per_turn: Sequence[float]) -> list[float]:
    """A row's per-token rewards: ``per_turn[t]`` on the last token of turn ``t``'s
    trained span, 0 on every other token (an empty span carries none)."""
    rewards = [0.0] * len(row)
    for turn, start, end in row.spans:
        if end > start:
            rewards[end - 1] = per_turn[turn]
    return rewards


@dataclass(frozen=True, slots=True)
class TurnValues:
    """A trajectory's ``reward_t`` and ``return_t`` per turn, computed once for all its
    rows (one per context segment); both ``None`` for a masked trajectory, which has
    none. The adapters that give a row's response tokens (TRL, verl) place them with
    :meth:`on_response`."""

    rewards: list[float] | None
    returns: list[float] | None

    @classmethod
    def of(cls, trajectory: Trajectory, gamma: float) -> TurnValues:
        if trajectory.masked or trajectory.reward is None:
            return cls(None, None)
        return cls(turn_rewards(trajectory), turn_returns(trajectory, gamma))

    def on_response(
        self, row: TokenRow, mask: Sequence[int]
    ) -> tuple[list[float] | None, list[float] | None]:
        """Per token of ``row`` after its prompt, cut to ``len(mask)`` (a response
        length), the turn's reward (on its last sampled token) and return (on all its
        sampled tokens), 0 where ``mask`` is 0; all 0 where the response is not the
        row's (TRL's EOS stand-in for an empty completion); ``(None, None)`` masked."""
        if self.rewards is None or self.returns is None:
            return None, None
        cut = row.prompt_length

        def on_mask(per_token: list[float]) -> list[float]:
            values = per_token[cut : cut + len(mask)]
            if len(values) != len(mask):
                return [0.0] * len(mask)
            return [v * m for v, m in zip(values, mask, strict=True)]

        return (
            on_mask(row_token_rewards(row, self.rewards)),
            on_mask(row_token_advantages(row, self.returns)),
        )

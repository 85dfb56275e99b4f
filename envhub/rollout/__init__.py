"""The rollout engine: episodes, continuous dispatch, GRPO groups, streaming, checks.

- :func:`run` (async) and :func:`run_sync` (blocking) are ``envhub rollout`` as a Python
  call: environment or client, policy, tasks, group size, concurrency, optional output
  file and time limit, in; summary (and the trajectories, without a file) out.
- :class:`EpisodeRunner` runs one episode into a ``Trajectory``; its :class:`TurnLoop`
  plays the turns (:class:`PolicyLoop`, policy <-> session, by default), recording them
  in an :class:`EpisodeRecord` and raising :class:`ModelFailure` for a model error.
- :func:`dispatch` keeps ``concurrency`` episodes in flight with no batch barrier;
  :func:`run_rollout` is the file-backed, resumable run behind ``envhub rollout``.
- :func:`stream` hands completed groups to a trainer loop (back-pressure, staleness).
- :class:`Sampler` decides which task each group samples (:class:`UniformSampler`, the
  default; :class:`AdaptiveSampler`, difficulty-adaptive), a :class:`Gate` whether a
  finished group is kept (:class:`UniformRewardGate`: DAPO's dynamic sampling); both
  serve :func:`run` and :func:`stream` (:mod:`envhub.rollout.sampling`).
- :class:`TreeConfig` (with a :class:`BranchRule` from :func:`make_branch_rule`) makes
  :func:`run` and :func:`stream` roll out trees: episodes forked at branch points, the
  tree a group (:mod:`envhub.rollout.tree`).
- :class:`GroupScoring` ranks each finished group with a group-relative LLM judge
  (``group_judge=`` of :func:`run` and :func:`stream`; :mod:`envhub.rollout.groups`).
- :func:`check_tasks` is ``envhub check``: reference scores 1, no-op scores 0.
- :mod:`envhub.rollout.pins`: ``run(..., pin="==0.2.0")`` and the ``--resume`` checks
  (:class:`PinWarning` for what a resume allows but cannot vouch for).
"""

from __future__ import annotations

from envhub.rollout.breaker import CircuitBreaker as CircuitBreaker
from envhub.rollout.check import CheckFailure as CheckFailure
from envhub.rollout.check import CheckReport as CheckReport
from envhub.rollout.check import check_tasks as check_tasks
from envhub.rollout.compaction import CompactionConfig as CompactionConfig
from envhub.rollout.dispatcher import dispatch as dispatch
from envhub.rollout.dispatcher import plan_episodes as plan_episodes
from envhub.rollout.dispatcher import run_rollout as run_rollout
from envhub.rollout.episode import EpisodeRecord as EpisodeRecord
from envhub.rollout.episode import EpisodeRunner as EpisodeRunner
from envhub.rollout.episode import EpisodeSpec as EpisodeSpec
from envhub.rollout.episode import ModelFailure as ModelFailure
from envhub.rollout.episode import PolicyLoop as PolicyLoop
from envhub.rollout.episode import TurnLoop as TurnLoop
from envhub.rollout.groups import GroupScoring as GroupScoring
from envhub.rollout.pins import PinWarning as PinWarning
from envhub.rollout.run import RolloutResult as RolloutResult
from envhub.rollout.run import run as run
from envhub.rollout.run import run_sync as run_sync
from envhub.rollout.sampling import AdaptiveSampler as AdaptiveSampler
from envhub.rollout.sampling import Gate as Gate
from envhub.rollout.sampling import Sampler as Sampler
from envhub.rollout.sampling import UniformRewardGate as UniformRewardGate
from envhub.rollout.sampling import UniformSampler as UniformSampler
from envhub.rollout.stream import Group as Group
from envhub.rollout.stream import RolloutStream as RolloutStream
from envhub.rollout.stream import stream as stream
from envhub.rollout.summary import RunSummary as RunSummary
from envhub.rollout.summary import pass_at_k as pass_at_k
from envhub.rollout.summary import summarize as summarize
from envhub.rollout.tasks import select_task_ids as select_task_ids
from envhub.rollout.tree import BranchRule as BranchRule
from envhub.rollout.tree import TreeConfig as TreeConfig
from envhub.rollout.tree import TreeRunner as TreeRunner
from envhub.rollout.tree import make_branch_rule as make_branch_rule

__all__ = [
    "AdaptiveSampler",
    "BranchRule",
    "CheckFailure",
    "CheckReport",
    "CircuitBreaker",
    "CompactionConfig",
    "EpisodeRecord",
    "EpisodeRunner",
    "EpisodeSpec",
    "Gate",
    "Group",
    "GroupScoring",
    "ModelFailure",
    "PinWarning",
    "PolicyLoop",
    "RolloutResult",
    "RolloutStream",
    "RunSummary",
    "Sampler",
    "TreeConfig",
    "TreeRunner",
    "TurnLoop",
    "UniformRewardGate",
    "UniformSampler",
    "check_tasks",
    "dispatch",
    "make_branch_rule",
    "pass_at_k",
    "plan_episodes",
    "run",
    "run_rollout",
    "run_sync",
    "select_task_ids",
    "stream",
    "summarize",
]

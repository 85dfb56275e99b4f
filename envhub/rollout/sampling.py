"""Which task the next GRPO group samples, and which finished groups are kept.

A :class:`Sampler` draws the task of each new group and learns from each finished one;
its :meth:`~Sampler.state_dict` is saved with the run (``OUTPUT.sampler.json`` beside an
``envhub rollout`` file; :meth:`RolloutStream.state_dict
<envhub.rollout.stream.RolloutStream.state_dict>` for a trainer's checkpoint), so a
resumed run continues the curriculum where it stopped rather than from scratch.

- :class:`UniformSampler` (the default): the tasks in their order, cycling. One draw per
  task is exactly the plan of a run without a sampler.
- :class:`AdaptiveSampler`: difficulty-adaptive. Task ``t`` with ``c`` passes in ``n``
  scored samples has the smoothed pass rate ``p = (c + prior) / (n + 2 * prior)`` and is
  drawn with probability proportional to ``floor + p * (1 - p)``. ``p * (1 - p)`` is the
  variance of a pass/fail reward: the expected GRPO signal of a group of that task. It
  peaks at ``p = 0.5`` and vanishes for tasks always solved or never solved, so draws
  shift towards tasks of moderate success; an unseen task has ``p = 0.5`` (explored
  first), and ``floor`` keeps every task drawable, so a task that becomes learnable is
  noticed again. Defaults: ``prior = 0.5`` (Jeffreys), ``floor = 0.01``.

A :class:`Gate` decides whether a finished group is kept. :class:`UniformRewardGate`
refuses a group whose scored rewards all agree (DAPO's dynamic sampling: every advantage
of such a group is zero, so it carries no GRPO signal). A refused group is dropped: a
stream does not hand it over and draws on, ``envhub rollout --groups N`` draws another
in its place. The sampler has seen its rewards either way (they are pass rates too).

:class:`GoldRestarts` restarts tasks never solved from a gold prefix (``envhub rollout
--gold-restart-after N --gold-prefix K|half``): once a task has ``N`` scored samples
played from scratch and none passed, every other group of it starts at turn ``k`` of a
replay of its gold actions (the policy plays on from the environment state and the
conversation the gold turns left; :mod:`envhub.rollout.gold` runs them), so a task the
policy cannot solve from the start still yields groups it can learn the last steps from;
the groups between go on from scratch, and the first scratch pass ends the restarts. ``k``
is ``K``, or half the task's gold actions, and at most all but the last (the policy
plays at least the last gold step); a task with fewer than two gold actions is never
restarted. The sampler observes every group, restarted ones too: its pass rates are
those of the groups the run draws.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from envhub.errors import InvalidRequest

__all__ = [
    "SAMPLERS",
    "AdaptiveSampler",
    "Gate",
    "GoldRestarts",
    "Sampler",
    "UniformRewardGate",
    "UniformSampler",
    "make_sampler",
]

SamplerKind = Literal["uniform", "adaptive"]
SAMPLERS: tuple[SamplerKind, ...] = ("uniform", "adaptive")


class Sampler(Protocol):
    """Draws the task of each new group; learns from each finished group."""

    kind: str

    def draw(self) -> str:
        """The task id the next group samples."""
        ...

    def observe(self, task_id: str, rewards: Sequence[float]) -> None:
        """The scored rewards of a finished group of ``task_id`` (masked samples left out)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything :meth:`load_state_dict` needs to continue exactly (JSON-safe)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class Gate(Protocol):
    """Whether a finished group is kept (a refused one is dropped, and replaced)."""

    def admit(self, task_id: str, rewards: Sequence[float]) -> bool: ...


class UniformRewardGate:
    """Refuses a group whose scored rewards all agree (DAPO's dynamic sampling)."""

    def admit(self, task_id: str, rewards: Sequence[float]) -> bool:
        return len(set(rewards)) > 1


def _check_kind(state: Mapping[str, Any], kind: str) -> None:
    if state.get("kind") != kind:
        raise InvalidRequest(
            f"the saved sampler state is {state.get('kind')!r}'s, not {kind!r}'s: resume "
            f"with --sampler {state.get('kind')}"
        )


class UniformSampler:
    """The tasks in order, cycling: draw ``i`` is ``task_ids[i % len(task_ids)]``."""

    kind = "uniform"

    def __init__(self, task_ids: Sequence[str]) -> None:
        if not task_ids:
            raise InvalidRequest("a sampler needs at least one task")
        self.task_ids = list(task_ids)
        self.drawn = 0

    def draw(self) -> str:
        task_id = self.task_ids[self.drawn % len(self.task_ids)]
        self.drawn += 1
        return task_id

    def observe(self, task_id: str, rewards: Sequence[float]) -> None:
        """The order does not depend on rewards."""

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "drawn": self.drawn}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_kind(state, self.kind)
        self.drawn = int(state["drawn"])


class AdaptiveSampler:
    """Difficulty-adaptive draws: weight ``floor + p * (1 - p)`` per task, ``p`` its
    smoothed pass rate (module docstring). A sample passes when its reward is at least
    ``success_threshold``; draws are reproducible per ``seed`` and observation order."""

    kind = "adaptive"

    def __init__(
        self,
        task_ids: Sequence[str],
        *,
        seed: int = 0,
        success_threshold: float = 1.0,
        prior: float = 0.5,
        floor: float = 0.01,
    ) -> None:
        if not task_ids:
            raise InvalidRequest("a sampler needs at least one task")
        if prior <= 0 or floor <= 0:
            raise InvalidRequest(f"prior and floor must be > 0, got {prior} and {floor}")
        self.task_ids = list(task_ids)
        self.success_threshold = success_threshold
        self.prior = prior
        self.floor = floor
        self.rng = random.Random(seed)
        self.samples: dict[str, int] = {}
        self.passes: dict[str, int] = {}

    def pass_rate(self, task_id: str) -> float:
        """The smoothed pass rate ``(c + prior) / (n + 2 * prior)``."""
        n, c = self.samples.get(task_id, 0), self.passes.get(task_id, 0)
        return (c + self.prior) / (n + 2 * self.prior)

    def weight(self, task_id: str) -> float:
        p = self.pass_rate(task_id)
        return self.floor + p * (1.0 - p)

    def draw(self) -> str:
        weights = [self.weight(t) for t in self.task_ids]
        return self.rng.choices(self.task_ids, weights)[0]

    def observe(self, task_id: str, rewards: Sequence[float]) -> None:
        self.samples[task_id] = self.samples.get(task_id, 0) + len(rewards)
        passed = sum(r >= self.success_threshold for r in rewards)
        self.passes[task_id] = self.passes.get(task_id, 0) + passed

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {
            "kind": self.kind,
            "rng": [version, list(internal), gauss],
            "samples": dict(self.samples),
            "passes": dict(self.passes),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_kind(state, self.kind)
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.samples = {str(k): int(v) for k, v in state["samples"].items()}
        self.passes = {str(k): int(v) for k, v in state["passes"].items()}


class GoldRestarts:
    """Which groups start from a gold prefix, and how long it is (module docstring).

    ``after``: scored scratch samples without a pass before a task is restarted.
    ``prefix``: gold turns to replay, or ``"half"``. ``gold_actions``: each task's
    number of gold actions (a task missing from it has none)."""

    def __init__(
        self,
        after: int,
        prefix: int | Literal["half"],
        gold_actions: Mapping[str, int],
        *,
        success_threshold: float = 1.0,
    ) -> None:
        if after < 1:
            raise InvalidRequest(f"--gold-restart-after must be >= 1, got {after}")
        if prefix != "half" and (not isinstance(prefix, int) or prefix < 1):
            raise InvalidRequest(f"--gold-prefix must be a turn count >= 1 or half, not {prefix!r}")
        self.after = after
        self.prefix = prefix
        self.gold_actions = dict(gold_actions)
        self.success_threshold = success_threshold
        self.samples: dict[str, int] = {}  # scored samples played from scratch
        self.passes: dict[str, int] = {}  # ... and how many of them passed
        self.restarted: dict[str, int] = {}  # groups started from a gold prefix
        self.last_restarted: set[str] = set()  # tasks whose last group drawn was one

    def turns(self, task_id: str) -> int:
        """The gold prefix of ``task_id``'s restarts: 0 when it has none to give."""
        gold = self.gold_actions.get(task_id, 0)
        wanted = gold // 2 if self.prefix == "half" else self.prefix
        return max(0, min(wanted, gold - 1))

    def start(self, task_id: str) -> int:
        """The gold prefix of a group of ``task_id`` drawn now (0: from scratch)."""
        k = self.turns(task_id)
        never_solved = not self.passes.get(task_id) and self.samples.get(task_id, 0) >= self.after
        if not k or not never_solved or task_id in self.last_restarted:
            self.last_restarted.discard(task_id)
            return 0
        self.last_restarted.add(task_id)
        self.restarted[task_id] = self.restarted.get(task_id, 0) + 1
        return k

    def observe(self, task_id: str, rewards: Sequence[float], gold_turns: int) -> None:
        """A finished group's scored rewards (scratch ones count towards the restart)."""
        if gold_turns:
            return
        self.samples[task_id] = self.samples.get(task_id, 0) + len(rewards)
        passed = sum(r >= self.success_threshold for r in rewards)
        self.passes[task_id] = self.passes.get(task_id, 0) + passed

    def state_dict(self) -> dict[str, Any]:
        return {
            "after": self.after,
            "prefix": self.prefix,
            "samples": dict(self.samples),
            "passes": dict(self.passes),
            "restarted": dict(self.restarted),
            "last_restarted": sorted(self.last_restarted),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if (state.get("after"), state.get("prefix")) != (self.after, self.prefix):
            raise InvalidRequest(
                f"the run restarted from gold prefixes with --gold-restart-after "
                f"{state.get('after')} --gold-prefix {state.get('prefix')}: resume with those"
            )
        self.samples = {str(k): int(v) for k, v in state["samples"].items()}
        self.passes = {str(k): int(v) for k, v in state["passes"].items()}
        self.restarted = {str(k): int(v) for k, v in state["restarted"].items()}
        self.last_restarted = {str(t) for t in state["last_restarted"]}


def make_sampler(
    kind: str, task_ids: Sequence[str], *, seed: int = 0, success_threshold: float = 1.0
) -> Sampler:
    """The sampler ``envhub rollout --sampler KIND`` names."""
    if kind == "uniform":
        return UniformSampler(task_ids)
    if kind == "adaptive":
        return AdaptiveSampler(task_ids, seed=seed, success_threshold=success_threshold)
    raise InvalidRequest(f"unknown sampler {kind!r}: {' | '.join(SAMPLERS)}")

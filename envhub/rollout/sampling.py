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


def make_sampler(
    kind: str, task_ids: Sequence[str], *, seed: int = 0, success_threshold: float = 1.0
) -> Sampler:
    """The sampler ``envhub rollout --sampler KIND`` names."""
    if kind == "uniform":
        return UniformSampler(task_ids)
    if kind == "adaptive":
        return AdaptiveSampler(task_ids, seed=seed, success_threshold=success_threshold)
    raise InvalidRequest(f"unknown sampler {kind!r}: {' | '.join(SAMPLERS)}")

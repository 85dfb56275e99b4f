"""The plan of a sampled rollout: groups drawn one at a time by a :class:`Sampler`.

``envhub rollout --sampler adaptive --groups N`` (or :func:`envhub.rollout.run` with a
``sampler``) does not fix its episodes up front: each time a worker is free and fewer
than ``N`` groups are kept or running, the sampler draws the next group's task, so its
choice uses every group finished so far. The ``r``-th group of a task is ``TASK#r``,
with samples ``r * group_size`` to ``r * group_size + group_size - 1`` (unique (task,
sample) pairs, as ``--resume`` and the file's compaction need). A group is *observed*
once all its samples are scored: the sampler learns its rewards and the gates keep or
drop it; a dropped group frees its place for another draw, up to ``max_draws`` in all.

Its state (the sampler's :meth:`~envhub.rollout.sampling.Sampler.state_dict`, how many
groups of each task were drawn, which are still pending, how many were kept and dropped:
O(tasks) bytes) is ``OUTPUT.sampler.json``, replaced atomically at every draw and every
observed group, so ``--resume`` continues
the curriculum even after ``kill -9``: groups still pending run their missing samples
(masked ones again), and a pending group whose samples the file already holds (killed
after the last write, before the state's) is observed from the file.

With ``restarts`` (:class:`~envhub.rollout.sampling.GoldRestarts`), each drawn group may
start from a gold prefix (its specs carry :class:`~envhub.rollout.episode.GoldStart`);
the state then also holds the restarts' counts and the prefix of each pending group, so
a resumed group starts where it was drawn to.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from envhub.errors import InvalidRequest
from envhub.rollout.episode import EpisodeSpec, GoldStart
from envhub.rollout.sampling import Gate, GoldRestarts, Sampler
from envhub.trajectory import Trajectory, read_records

__all__ = ["DrawnPlan", "sampler_path"]

STATE_VERSION = 1


def sampler_path(output: str | Path) -> Path:
    """Where a sampled run's state lives: beside its trajectory file."""
    return Path(f"{output}.sampler.json")


def _group_id(task_id: str, round_index: int) -> str:
    return f"{task_id}#{round_index}"  # as envhub.rollout.dispatcher.group_id


class DrawnPlan:
    """Draws, observes and saves the groups of one sampled run (module docstring).

    ``groups``: how many groups to keep (default: one per task). ``max_draws``: how many
    to draw at most, dropped ones included (default: four times ``groups``).
    ``restarts``: which groups start from a gold prefix (default: none)."""

    def __init__(
        self,
        sampler: Sampler,
        *,
        group_size: int,
        groups: int,
        gates: Sequence[Gate] = (),
        max_draws: int | None = None,
        state_path: Path | None = None,
        restarts: GoldRestarts | None = None,
    ) -> None:
        if group_size < 1 or groups < 1:
            raise InvalidRequest(f"group size and groups must be >= 1, got {group_size}, {groups}")
        if gates and group_size < 2:
            raise InvalidRequest("dropping groups whose rewards agree needs a group size >= 2")
        self.sampler = sampler
        self.group_size = group_size
        self.groups = groups
        self.gates = list(gates)
        self.max_draws = max_draws if max_draws is not None else 4 * groups
        self.state_path = state_path  # set by run_rollout for a run with an output file
        self.rounds: Counter[str] = Counter()  # groups drawn per task: TASK#0 .. TASK#n-1
        self.pending: dict[str, dict[int, float | None]] = {}  # group -> index -> reward
        self.kept = 0
        self.dropped = 0
        self._queued: set[str] = set()  # pending groups whose samples this run dispatched
        self.restarts = restarts
        self.gold_turns: dict[str, int] = {}  # pending groups started from a gold prefix

    # -- counts ------------------------------------------------------------------------

    @property
    def draws(self) -> int:
        return self.rounds.total()

    def wants_more(self) -> bool:
        """Whether a dispatch round has anything to run: unqueued pending groups, or room
        for another draw."""
        return any(gid not in self._queued for gid in self.pending) or self._may_draw()

    def _may_draw(self) -> bool:
        return self.kept + len(self.pending) < self.groups and self.draws < self.max_draws

    def exhausted(self) -> bool:
        """Fewer than ``groups`` kept or running, and ``max_draws`` reached."""
        return self.kept + len(self.pending) < self.groups and self.draws >= self.max_draws

    def planned_pairs(self) -> set[tuple[str, int]]:
        """The (task, sample) pairs of every group drawn."""
        return {
            (task_id, i)
            for task_id, rounds in self.rounds.items()
            for i in range(rounds * self.group_size)
        }

    def undrawn(self) -> int:
        """Groups still to draw to reach ``groups`` kept, within ``max_draws``."""
        want = self.groups - self.kept - len(self.pending)
        return max(0, min(want, self.max_draws - self.draws))

    def expected_episodes(self) -> int:
        """The run's episodes if no more groups are dropped (for the progress bar)."""
        return (self.groups + self.dropped) * self.group_size

    # -- the run -----------------------------------------------------------------------

    def specs(self) -> Iterator[EpisodeSpec]:
        """The next episodes, drawn lazily (each ``next`` may draw a group): first the
        missing samples of pending groups this run has not run, then new draws."""
        for gid, done in list(self.pending.items()):
            if gid not in self._queued:
                self._queued.add(gid)
                task_id, round_text = gid.rsplit("#", 1)
                missing = [i for i in self._indices(int(round_text)) if done.get(i) is None]
                gold = self._gold(gid, len(missing))
                for i in missing:
                    yield EpisodeSpec(task_id, i, gid, gold)
        while self._may_draw():
            task_id = self.sampler.draw()
            round_index = self.rounds[task_id]
            self.rounds[task_id] += 1
            gid = _group_id(task_id, round_index)
            self.pending[gid] = {}
            self._queued.add(gid)
            if self.restarts is not None and (turns := self.restarts.start(task_id)):
                self.gold_turns[gid] = turns
            self.save()  # before any of its episodes can finish
            gold = self._gold(gid, self.group_size)
            for i in self._indices(round_index):
                yield EpisodeSpec(task_id, i, gid, gold)

    def _gold(self, gid: str, members: int) -> GoldStart | None:
        turns = self.gold_turns.get(gid)
        return None if turns is None else GoldStart(turns, members)

    def _indices(self, round_index: int) -> range:
        return range(round_index * self.group_size, (round_index + 1) * self.group_size)

    def record(self, trajectory: Trajectory) -> None:
        """A finished episode; observes its group once every sample of it is scored."""
        self._note(trajectory.group_id, trajectory.sample_index,
                   None if trajectory.masked else trajectory.reward)  # fmt: skip

    def _note(self, gid: str, index: int, reward: float | None) -> None:
        results = self.pending.get(gid)
        if results is None:
            return
        results[index] = reward
        if len(results) < self.group_size or any(r is None for r in results.values()):
            return
        task_id = gid.rsplit("#", 1)[0]
        rewards = [r for _, r in sorted(results.items()) if r is not None]
        self.sampler.observe(task_id, rewards)
        if self.restarts is not None:
            self.restarts.observe(task_id, rewards, self.gold_turns.pop(gid, 0))
        if all(gate.admit(task_id, rewards) for gate in self.gates):
            self.kept += 1
        else:
            self.dropped += 1
        del self.pending[gid]
        self.save()

    # -- state -------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """O(tasks + pending groups): the groups drawn are ``rounds``, TASK#0 .. TASK#n-1."""
        return {
            "version": STATE_VERSION,
            "group_size": self.group_size,
            "sampler": self.sampler.state_dict(),
            "rounds": dict(self.rounds),
            "pending": sorted(self.pending),
            "kept": self.kept,
            "dropped": self.dropped,
            "gold": None if self.restarts is None else {
                "restarts": self.restarts.state_dict(), "pending": dict(self.gold_turns),
            },
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise InvalidRequest(f"unknown sampler state version {state.get('version')!r}")
        if state["group_size"] != self.group_size:
            raise InvalidRequest(
                f"the run was sampled with --group-size {state['group_size']}, not "
                f"{self.group_size}: resume with the same group size"
            )
        self.sampler.load_state_dict(state["sampler"])
        self.rounds = Counter({str(k): int(v) for k, v in state["rounds"].items()})
        self.pending = {str(gid): {} for gid in state["pending"]}
        self.kept, self.dropped = int(state["kept"]), int(state["dropped"])
        gold = state.get("gold")
        if (gold is None) != (self.restarts is None):
            raise InvalidRequest(
                "the run was sampled " + ("with" if gold else "without") + " gold restarts: "
                "resume it " + ("with the same" if gold else "without") + " --gold-restart-after"
            )
        if self.restarts is not None and gold is not None:
            self.restarts.load_state_dict(gold["restarts"])
            self.gold_turns = {str(gid): int(k) for gid, k in gold["pending"].items()}

    def save(self) -> None:
        """Replace the state file atomically (a crash keeps the old or the new one)."""
        if self.state_path is None:
            return
        temporary = self.state_path.with_name(self.state_path.name + ".tmp")
        temporary.write_text(json.dumps(self.state_dict()), encoding="utf-8")
        os.replace(temporary, self.state_path)

    def resume(self, output: Path) -> None:
        """Continue the run of ``output``: load its state, then take what the file holds
        of the pending groups (observing those it holds whole)."""
        assert self.state_path is not None
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InvalidRequest(
                f"{output} has no sampler state ({self.state_path.name}): it was not "
                "written by a sampled run; resume it without --sampler/--groups"
            ) from None
        except (OSError, ValueError) as exc:
            raise InvalidRequest(f"{self.state_path} is unreadable: {exc}") from None
        try:
            self.load_state_dict(state)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRequest(f"{self.state_path} is malformed: {exc!r}") from None
        found: dict[str, dict[int, float | None]] = {}
        for record in read_records(output):  # the latest record of a pair wins
            if record.get("group_id") in self.pending:
                reward = None if record.get("masked") else record.get("reward")
                found.setdefault(record["group_id"], {})[record["sample_index"]] = reward
        for gid, results in found.items():
            for index, reward in results.items():
                self._note(gid, index, reward)

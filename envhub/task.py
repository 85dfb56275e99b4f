"""Tasks and task sets.

A :class:`Task` is one row of data (id, prompt messages, gold answer, gold actions for
the reference policy, metadata). A :class:`TaskSet` is an ordered, id-indexed collection
with named splits and a seeded order, loadable from package data or from user files
(JSONL/Parquet through ``datasets``, imported lazily). :meth:`TaskSet.content_hash` names
a task set's content, so that a run can record which task data it drew from.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from envhub.errors import InvalidRequest, TaskNotFound
from envhub.types import Message

__all__ = ["GoldCall", "Task", "TaskSet"]


class GoldCall(BaseModel):
    """One tool call of a task's gold solution, replayed by the reference policy."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Task(BaseModel):
    """One task: the first messages the model sees and what a correct episode looks like."""

    model_config = ConfigDict(extra="allow")

    id: str
    prompt: list[Message]
    answer: Any = None
    gold_actions: list[GoldCall] = Field(default_factory=list)
    split: str = "train"
    metadata: dict[str, Any] = Field(default_factory=dict)


class TaskSet:
    """Tasks with fixed ids, split membership and a reproducible order."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._tasks: list[Task] = list(tasks)
        self._by_id: dict[str, Task] = {}
        self._hash: str | None = None
        self._hash_lock = threading.Lock()
        for task in self._tasks:
            if task.id in self._by_id:
                raise InvalidRequest(f"duplicate task id {task.id!r}")
            self._by_id[task.id] = task

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._by_id

    @property
    def splits(self) -> list[str]:
        return sorted({t.split for t in self._tasks})

    def get(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise TaskNotFound(f"unknown task {task_id!r}") from None

    def split(self, name: str | None) -> list[Task]:
        """Tasks of one split in their fixed order (``None``: all tasks)."""
        if name is None:
            return list(self._tasks)
        if name not in self.splits:
            raise InvalidRequest(f"unknown split {name!r}; splits: {', '.join(self.splits)}")
        return [t for t in self._tasks if t.split == name]

    def shuffled(self, split: str | None = None, seed: int = 0) -> list[Task]:
        """A seeded permutation of a split: the same seed always gives the same order."""
        tasks = self.split(split)
        random.Random(seed).shuffle(tasks)
        return tasks

    def sample(self, seed: int | None, split: str | None = None) -> Task:
        """One task chosen by seed (used when a session is created without a task id)."""
        tasks = self.split(split)
        if not tasks:
            raise TaskNotFound("this environment has no tasks")
        return random.Random(seed).choice(tasks)

    def content_hash(self) -> str:
        """``"sha256:<hex>"`` of every task in its fixed order, each task whole (id, prompt,
        answer, gold actions, split, metadata and any extra field) as canonical JSON
        (sorted keys, no spaces, UTF-8): two task sets have the same hash exactly when a
        run would draw the same tasks, in the same order, and score them against the same
        data. Order is part of it because ``--tasks 0:100`` slices it.

        Computed on first use and kept by this object, so once per task set per process
        (a :class:`~envhub.LocalEnvironment` shares its loaded task set with every other
        of the same options). Deliberately not cached on disk: a key such as
        distribution + version + options is not safe, because the same key can name other
        tasks: an editable install (``pip install -e``) whose data files changed, an
        option that is a path to a user's file, data built from other packages or
        downloads. Hashing costs a fraction of what loading the task set costs (it
        serializes what loading parsed), and a run loads the task set anyway.
        """
        with self._hash_lock:
            if self._hash is None:
                digest = hashlib.sha256()
                digest.update(b"[")
                for i, task in enumerate(self._tasks):
                    if i:
                        digest.update(b",")
                    data = to_jsonable_python(task, fallback=repr)  # an answer may be any object
                    text = json.dumps(data, sort_keys=True, separators=(",", ":"),
                                      ensure_ascii=False)
                    digest.update(text.encode("utf-8", "surrogatepass"))
                digest.update(b"]")
                self._hash = f"sha256:{digest.hexdigest()}"
            return self._hash

    # -- loading -----------------------------------------------------------------------

    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]]) -> TaskSet:
        return cls(Task.model_validate(r) for r in records)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> TaskSet:
        """Plain JSONL, one task per line (no ``datasets`` needed)."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_records(json.loads(line) for line in fh if line.strip())

    @classmethod
    def from_package(cls, package: str, resource: str = "tasks.jsonl") -> TaskSet:
        """Tasks shipped as package data (``importlib.resources``)."""
        with resources.files(package).joinpath(resource).open("r", encoding="utf-8") as fh:
            return cls.from_records(json.loads(line) for line in fh if line.strip())

    @classmethod
    def from_file(cls, path: str | Path) -> TaskSet:
        """A user file in any format ``datasets`` reads (JSONL, JSON, Parquet, CSV)."""
        suffix = Path(path).suffix.lstrip(".").lower()
        builder = {"jsonl": "json", "json": "json", "parquet": "parquet", "csv": "csv"}.get(suffix)
        if builder is None:
            raise InvalidRequest(
                f"unsupported task file {path}: use .jsonl, .json, .parquet or .csv"
            )
        try:
            import datasets
        except ImportError:  # pragma: no cover - depends on the installed extras
            if builder == "json":
                return cls.from_jsonl(path)
            raise InvalidRequest("reading Parquet/CSV tasks needs `pip install datasets`") from None
        data = datasets.load_dataset(builder, data_files=str(path), split="train")
        return cls.from_records(data)

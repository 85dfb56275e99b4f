"""Reasoning Gym entries as envhub tasks, generated once per option set and kept.

Each dataset is built as ``create_dataset(name, seed=seed, size=size, **config)``, so a
task is Reasoning Gym's entry ``index`` of that dataset: the same seed gives the same
tasks on every machine. The raw entries (their ``metadata`` is what ``score_answer``
reads, and not always JSON) stay in this process beside the tasks; the environment
looks its episode's entry up here by the task's position.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from envhub import GoldCall, Task, TaskSet
from envhub.errors import InvalidRequest

__all__ = ["SYSTEM_PROMPT", "Generated", "TaskKey", "generate"]

SYSTEM_PROMPT = (
    "Solve the problem. When you are done, call the `answer` tool with only the final "
    "answer, in exactly the format the question asks for, without explanation."
)
PYTHON_HINT = " You may run Python code with the `python` tool to help (no network)."

#: (datasets, seed, size, config as canonical JSON, python tool on)
TaskKey = tuple[tuple[str, ...], int, int, str, bool]


@dataclass(frozen=True)
class Generated:
    tasks: list[Task]
    entries: list[dict[str, Any]]


_CACHE: dict[TaskKey, Generated] = {}
_CACHE_SIZE = 32  # option sets kept; a client's option set counts too
_LOCK = threading.Lock()


def _task(
    name: str, seed: int, index: int, position: int, entry: dict[str, Any], python: bool
) -> Task:
    answer = entry.get("answer")
    system = SYSTEM_PROMPT + (PYTHON_HINT if python else "")
    return Task(
        id=f"{name}-{seed}-{index:04d}",
        prompt=[
            {"role": "system", "content": system},
            {"role": "user", "content": str(entry["question"])},
        ],
        answer=answer,
        gold_actions=[]
        if answer is None
        else [GoldCall(name="answer", arguments={"answer": answer})],
        metadata={"dataset": name, "index": index, "position": position},
    )


def _build(key: TaskKey) -> Generated:
    from reasoning_gym.factory import create_dataset

    names, seed, size, config_json, python = key
    config = json.loads(config_json)
    tasks: list[Task] = []
    entries: list[dict[str, Any]] = []
    for name in names:
        try:
            dataset = create_dataset(name, seed=seed, size=size, **config.get(name, {}))
            generated = [dataset[index] for index in range(size)]
        except Exception as exc:  # a generator that fails on this config
            reason = str(exc) or type(exc).__name__
            raise InvalidRequest(
                f"Reasoning Gym dataset {name!r} could not generate tasks: {reason[:300]}"
            ) from exc
        for index, entry in enumerate(generated):
            tasks.append(_task(name, seed, index, len(entries), entry, python))
            entries.append(entry)
    return Generated(tasks, entries)


def generate(key: TaskKey) -> Generated:
    """The tasks and entries of ``key``; built on first use (seconds for the full set).
    A dataset that cannot generate is an :class:`InvalidRequest` naming it."""
    with _LOCK:
        found = _CACHE.get(key)
    if found is not None:
        return found
    built = _build(key)
    with _LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        return _CACHE.setdefault(key, built)


def task_set(key: TaskKey) -> TaskSet:
    return TaskSet(generate(key).tasks)

"""A trajectory as a line of a BFCL result file (what BFCL's ``eval_runner`` reads).

The result is taken from the recorded conversation, as BFCL's FC handlers record a
model's output: each assistant message is a step, its tool calls a list of
``{name: arguments}`` (its text when it has none). Single-turn: the calls of the
messages before the first message without calls, as one list. Multi-turn: one list of
steps per user turn, a user turn starting at each user message after the first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envhub.trajectory import Trajectory
from envhub.types import ToolCall
from envhub_bfcl.categories import CATEGORIES, kind_of
from envhub_bfcl.checker import MODEL_NAME

__all__ = ["bfcl_result", "bfcl_step", "category_of", "write_result_files"]


def bfcl_step(calls: list[ToolCall]) -> list[dict[str, str]]:
    """One assistant message's calls as a BFCL FC step: ``[{name: arguments_json}]``."""
    return [{c.name: c.to_openai()["function"]["arguments"]} for c in calls]


def _step(message: dict[str, Any]) -> list[dict[str, str]] | str:
    calls = [ToolCall.model_validate(c) for c in message.get("tool_calls") or []]
    if not calls:
        return str(message.get("content") or "")
    return bfcl_step(calls)


def bfcl_result(messages: list[dict[str, Any]], multi_turn: bool) -> Any:
    """The ``result`` field of a BFCL result-file line for one episode's messages."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), 0)
    if not multi_turn:
        calls: list[dict[str, str]] = []
        for message in messages[first_user:]:
            if message.get("role") != "assistant":
                continue
            step = _step(message)
            if isinstance(step, str):
                break
            calls.extend(step)
        return calls
    turns: list[list[Any]] = []
    previous = "assistant"
    for message in messages[first_user:]:
        role = message.get("role")
        if role == "user" and previous != "user":
            turns.append([])
        if role == "assistant":
            turns[-1].append(_step(message))
        previous = role
    return turns


def category_of(task_id: str) -> str:
    """The BFCL category of an entry id (``live_simple_3-2-0`` -> ``live_simple``)."""
    return task_id.rsplit("_", 1)[0]


def write_result_files(trajectories: Iterable[Trajectory], output: Path) -> int:
    """BFCL result files for the ``bfcl`` trajectories among ``trajectories``, laid out as
    BFCL's generator writes them (``OUTPUT/MODEL/GROUP/BFCL_v4_CATEGORY_result.json``,
    one entry per line, sorted by id), so ``bfcl evaluate --result-dir OUTPUT`` and its
    ``eval_runner`` read them. MODEL is :data:`~envhub_bfcl.checker.MODEL_NAME`, an FC
    model, so BFCL decodes the calls as envhub recorded them. A masked trajectory (an
    infrastructure failure) has no result and is skipped; so is another environment's.
    Returns the number of entries written."""
    from bfcl_eval.constants.category_mapping import VERSION_PREFIX
    from bfcl_eval.utils import get_directory_structure_by_category, sort_key

    by_category: dict[str, list[dict[str, Any]]] = {}
    for trajectory in trajectories:
        category = category_of(trajectory.task_id)
        if trajectory.env.name != "bfcl" or trajectory.masked or category not in CATEGORIES:
            continue
        multi = kind_of(category) == "multi_turn"
        by_category.setdefault(category, []).append(
            {
                "id": trajectory.task_id,
                "result": bfcl_result(trajectory.messages, multi),
                "latency": trajectory.timings.total_s,
                "input_token_count": trajectory.usage.prompt_tokens,
                "output_token_count": trajectory.usage.completion_tokens,
            }
        )
    written = 0
    for category, lines in by_category.items():
        folder = Path(output) / MODEL_NAME / get_directory_structure_by_category(category)
        folder.mkdir(parents=True, exist_ok=True)
        lines.sort(key=sort_key)
        with open(folder / f"{VERSION_PREFIX}_{category}_result.json", "w") as fh:
            fh.writelines(json.dumps(line) + "\n" for line in lines)
        written += len(lines)
    return written

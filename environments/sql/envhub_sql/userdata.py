"""Tasks from a Spider- or BIRD-layout dataset on disk.

Spider rows look like ``{"db_id", "question", "query"}``; BIRD rows like
``{"question_id", "db_id", "question", "evidence", "SQL", "difficulty"}``. Databases live
at ``<db_root>/<db_id>/<db_id>.sqlite``. The file's stem is the split (``dev.json`` ->
``dev``), so the ids are stable as long as the file is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envhub import GoldCall, Task, TaskSet
from envhub.errors import InvalidRequest
from envhub_sql.prompts import task_prompt

__all__ = ["load_user_tasks"]


def _records(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    if not isinstance(data, list):
        raise InvalidRequest(f"{path}: expected a JSON list of questions (Spider/BIRD layout)")
    return data


def _task(record: dict[str, Any], index: int, split: str) -> Task:
    try:
        db_id, question = record["db_id"], record["question"]
    except KeyError as exc:
        raise InvalidRequest(f"question {index}: missing field {exc.args[0]!r}") from None
    gold = record.get("SQL") or record.get("query")
    if not gold:
        raise InvalidRequest(f"question {index}: no gold SQL (field 'query' or 'SQL')")
    qid = record.get("question_id", index)
    metadata = {"db_id": db_id, "source": "bird" if "SQL" in record else "spider"}
    if record.get("difficulty"):
        metadata["difficulty"] = record["difficulty"]
    return Task(
        id=f"{split}-{qid}",
        prompt=task_prompt(db_id, question, record.get("evidence") or None),
        answer=gold,
        gold_actions=[GoldCall(name="submit_sql", arguments={"query": gold})],
        split=split,
        metadata=metadata,
    )


def load_user_tasks(tasks: str | Path, db_root: str | Path) -> TaskSet:
    """Read a Spider/BIRD question file; every ``db_id`` must exist under ``db_root``."""
    path, root = Path(tasks), Path(db_root)
    if not path.is_file():
        raise InvalidRequest(f"tasks file not found: {path}")
    if not root.is_dir():
        raise InvalidRequest(f"db_root is not a directory: {root}")
    task_list = [_task(r, i, path.stem) for i, r in enumerate(_records(path))]
    missing = sorted({t.metadata["db_id"] for t in task_list} - {p.name for p in root.iterdir()})
    if missing:
        raise InvalidRequest(f"databases missing under {root}: {', '.join(missing[:10])}")
    return TaskSet(task_list)

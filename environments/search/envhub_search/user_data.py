"""User corpora and question files in Search-R1's JSONL layouts.

Corpus lines are ``{"id", "title", "text"}``, or Search-R1's ``{"id", "contents"}``
where ``contents`` is ``"Title"\\ntext``. Question lines are ``{"question",
"golden_answers"}`` (Search-R1), with ``answers``/``answer`` accepted too, and optional
``id``, ``split`` and ``gold_passages`` (passage or document ids, used for the
retrieval metric).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from envhub import Task
from envhub.errors import InvalidRequest
from envhub_search.articles import Document, Sentence, sentences
from envhub_search.questions import task_from_parts

__all__ = ["read_corpus", "read_tasks"]


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror}") from None
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidRequest(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise InvalidRequest(f"{path}:{number}: expected a JSON object")
            yield number, record


def read_corpus(path: str | Path) -> Iterator[Document]:
    """Documents of a user corpus; ids must be unique strings or numbers."""
    path = Path(path)
    seen: set[str] = set()
    for number, record in _records(path):
        if "id" not in record:
            raise InvalidRequest(f"{path}:{number}: a corpus line needs an 'id'")
        doc_id = str(record["id"])
        if doc_id in seen:
            raise InvalidRequest(f"{path}:{number}: duplicate document id {doc_id!r}")
        seen.add(doc_id)
        if "contents" in record and "text" not in record:
            title, _, text = str(record["contents"]).partition("\n")
            title = title.strip().strip('"')
        else:
            title, text = str(record.get("title") or ""), record.get("text")
        if not isinstance(text, str):
            raise InvalidRequest(f"{path}:{number}: a corpus line needs 'text' (or 'contents')")
        yield Document(doc_id, title or doc_id, [Sentence(s) for s in sentences(text)])


def _answers(record: dict[str, Any]) -> list[str]:
    for field in ("golden_answers", "answers", "answer"):
        value = record.get(field)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return [str(value)]
        if isinstance(value, list) and value:
            return [str(v) for v in value]
    return []


def read_tasks(path: str | Path) -> list[Task]:
    """Tasks from a question file; the reference policy searches the question, then answers."""
    path = Path(path)
    tasks = []
    for number, record in _records(path):
        question, answers = record.get("question"), _answers(record)
        if not isinstance(question, str) or not question.strip() or not answers:
            raise InvalidRequest(
                f"{path}:{number}: a question line needs 'question' and 'golden_answers'"
            )
        task_id = str(record.get("id", f"user-{number:06d}"))
        task = task_from_parts(
            task_id, question, answers, [question],
            gold_passages=[str(p) for p in record.get("gold_passages") or []],
            metadata={"type": "user", "source": str(record.get("data_source", path.name))},
        )
        if "split" in record:
            task.split = str(record["split"])
        tasks.append(task)
    if not tasks:
        raise InvalidRequest(f"{path}: no questions")
    return tasks

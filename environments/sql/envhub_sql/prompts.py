"""The messages a SQL task starts with, shared by shipped and user tasks."""

from __future__ import annotations

from envhub.types import Message

__all__ = ["SYSTEM_PROMPT", "task_prompt"]

SYSTEM_PROMPT = (
    "You answer questions about a SQLite database by writing SQL. Explore the database with "
    "list_tables, describe_table and run_sql (read-only; at most 50 rows are shown), then call "
    "submit_sql with one SELECT query whose result answers the question. The submission is "
    "scored by comparing its result rows with those of a reference query, so return exactly "
    "the columns the question asks for."
)


def task_prompt(db_id: str, question: str, hint: str | None = None) -> list[Message]:
    lines = [f"Database: {db_id}", f"Question: {question.strip()}"]
    if hint:
        lines.append(f"Hint: {hint.strip()}")
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n".join(lines)},
    ]

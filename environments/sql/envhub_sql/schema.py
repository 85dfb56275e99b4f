"""Column notes written for the shipped databases (``data/<db>.yaml``).

Notes serve two readers: ``describe_table`` shows them to the model, and the task
generator uses ``role``/``phrase``/``noun`` to pick columns and word its questions.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, Field

__all__ = ["ColumnNote", "DatabaseNotes", "TableNote", "load_notes"]


class ColumnNote(BaseModel):
    note: str = ""
    #: label names a row; category has few values (filters, grouping); measure is numeric
    role: Literal["label", "category", "measure"] | None = None
    phrase: str | None = None  # how a question names the column


class TableNote(BaseModel):
    noun: str
    plural: str
    note: str = ""
    columns: dict[str, ColumnNote] = Field(default_factory=dict)

    def label(self) -> str | None:
        return next((c for c, n in self.columns.items() if n.role == "label"), None)

    def with_role(self, role: str) -> list[str]:
        return [c for c, n in self.columns.items() if n.role == role]

    def phrase(self, column: str) -> str:
        return self.columns[column].phrase or column.replace("_", " ")


class DatabaseNotes(BaseModel):
    description: str = ""
    tables: dict[str, TableNote] = Field(default_factory=dict)


@cache
def load_notes(db_id: str) -> DatabaseNotes:
    text = resources.files("envhub_sql").joinpath(f"data/{db_id}.yaml").read_text("utf-8")
    return DatabaseNotes.model_validate(yaml.safe_load(text))

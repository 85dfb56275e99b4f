"""Generate the shipped SQL tasks: gold queries sampled from a grammar over each database's
foreign-key graph, verbalised by templates from our column notes, then verified.

Every task comes from ``(seed, database, family, attempt)`` alone, so re-running
``python -m envhub_sql.generator`` rewrites ``data/tasks.jsonl`` byte for byte. A candidate
is kept only if its gold query finishes in under 1 s, returns 1-100 rows without an
all-NULL row, and is unambiguous by construction: named rows are looked up by a label
that is unique in its table, ORDER BY ... LIMIT answers have no ties within or at the
cut-off, and two different queries never share a question.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from envhub import GoldCall, Task
from envhub_sql.catalog import resolve_database
from envhub_sql.connection import QueryError, open_readonly, run_query
from envhub_sql.hardness import hardness
from envhub_sql.prompts import task_prompt
from envhub_sql.schema import DatabaseNotes, TableNote

__all__ = ["QUOTAS", "generate_tasks", "hand_tasks", "main"]

GOLD_TIME_LIMIT_S = 1.0
MAX_GOLD_ROWS = 100
TEST_EVERY = 5  # every fifth task of a database is in the test split
#: tasks per database and family (families that do not fit a schema yield fewer)
QUOTAS: dict[str, int] = {
    "count_where": 35,
    "aggregate": 40,
    "lookup": 35,
    "filter_list": 30,
    "count_distinct": 8,
    "group_count": 12,
    "top_k": 40,
    "join_count": 45,
    "join_group": 25,
    "join_agg_top": 30,
    "group_having": 20,
    "above_average": 30,
    "no_children": 10,
    "two_hop_count": 40,
}
_ATTEMPTS = 25  # candidates tried per wanted task before a family gives up

AGGREGATES = {"MAX": "maximum", "MIN": "minimum", "AVG": "average", "SUM": "combined"}
#: families whose gold is one COUNT: a count of 0 is dropped as a trivial answer
COUNT_FAMILIES = frozenset({"count_where", "count_distinct", "join_count", "two_hop_count"})


@dataclass(frozen=True)
class ForeignKey:
    child: str
    column: str
    parent: str
    parent_column: str


@dataclass(frozen=True)
class Candidate:
    family: str
    sql: str
    question: str


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _quoted(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


class Sampler:
    """Draws candidate (SQL, question) pairs for one database."""

    def __init__(self, conn: sqlite3.Connection, notes: DatabaseNotes) -> None:
        self.conn = conn
        self.notes = notes
        self.fks = [
            ForeignKey(table, row[3], row[2], row[4])
            for table in notes.tables
            for row in conn.execute(f"PRAGMA foreign_key_list({table})").fetchall()
        ]
        self._cache: dict[str, list[tuple[Any, ...]]] = {}

    # -- data access ------------------------------------------------------------------------

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if sql not in self._cache:
            self._cache[sql] = self.conn.execute(sql).fetchall()
        return self._cache[sql]

    def values(self, table: str, column: str) -> list[Any]:
        """Distinct non-NULL values, sorted (so sampling from them is reproducible)."""
        return [
            r[0]
            for r in self.rows(
                f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT NULL "
                f"ORDER BY {column}"
            )
        ]

    def has_nulls(self, table: str, column: str) -> bool:
        return bool(self.rows(f"SELECT 1 FROM {table} WHERE {column} IS NULL LIMIT 1"))

    def unique_labels(self, table: str) -> list[Any]:
        """Label values that name exactly one row of ``table``."""
        label = self.notes.tables[table].label()
        if label is None:
            return []
        return [
            r[0]
            for r in self.rows(
                f"SELECT {label} FROM {table} WHERE {label} IS NOT NULL "
                f"GROUP BY {label} HAVING COUNT(*) = 1 ORDER BY {label}"
            )
        ]

    def labels_unique(self, table: str) -> bool:
        label = self.notes.tables[table].label()
        if label is None:
            return False
        total, distinct = self.rows(f"SELECT COUNT(*), COUNT(DISTINCT {label}) FROM {table}")[0]
        return total == distinct

    def no_ties(self, sql_values: str, k: int) -> bool:
        """The first ``k + 1`` ordering values are pairwise distinct (no tie at the cut)."""
        values = [r[0] for r in self.rows(sql_values)]
        return (
            len(values) >= k
            and None not in values
            and len(set(values[: k + 1])) == len(values[: k + 1])
        )

    # -- helpers -------------------------------------------------------------------------------

    def tables_with(self, rng: random.Random, *roles: str) -> tuple[str, TableNote] | None:
        fitting = [
            (n, t) for n, t in self.notes.tables.items() if all(t.with_role(r) for r in roles)
        ]
        return rng.choice(fitting) if fitting else None

    def fk_phrase(self, fk: ForeignKey) -> str:
        """How a question names the relation; the column is named only if several FKs
        connect the same two tables (flights.origin and flights.dest both point at airports)."""
        twins = [f for f in self.fks if f.child == fk.child and f.parent == fk.parent]
        return f" through the {fk.column} column" if len(twins) > 1 else ""

    def join_fks(self, require_label: bool = True) -> list[ForeignKey]:
        return [
            fk
            for fk in self.fks
            if fk.child != fk.parent
            and fk.parent in self.notes.tables
            and (not require_label or self.notes.tables[fk.parent].label())
        ]

    # -- families -----------------------------------------------------------------------------

    def count_where(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "category")
        if picked is None:
            return None
        table, note = picked
        column = rng.choice(note.with_role("category"))
        value = rng.choice(self.values(table, column))
        return Candidate(
            "count_where",
            f"SELECT COUNT(*) FROM {table} WHERE {column} = {_literal(value)}",
            f"How many {note.plural} have {note.phrase(column)} {_quoted(value)}?",
        )

    def aggregate(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "measure")
        if picked is None:
            return None
        table, note = picked
        measure = rng.choice(note.with_role("measure"))
        func = rng.choice(list(AGGREGATES))
        sql = f"SELECT {func}({measure}) FROM {table}"
        question = f"What is the {AGGREGATES[func]} {note.phrase(measure)} of all {note.plural}?"
        categories = note.with_role("category")
        if categories and rng.random() < 0.6:
            column = rng.choice(categories)
            value = rng.choice(self.values(table, column))
            sql += f" WHERE {column} = {_literal(value)}"
            question = (
                f"What is the {AGGREGATES[func]} {note.phrase(measure)} of the {note.plural} "
                f"with {note.phrase(column)} {_quoted(value)}?"
            )
        return Candidate("aggregate", sql, question)

    def lookup(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "label", "measure")
        if picked is None:
            return None
        table, note = picked
        labels = self.unique_labels(table)
        if not labels:
            return None
        label, value = note.label(), rng.choice(labels)
        measure = rng.choice(note.with_role("measure") + note.with_role("category"))
        return Candidate(
            "lookup",
            f"SELECT {measure} FROM {table} WHERE {label} = {_literal(value)}",
            f"What is the {note.phrase(measure)} of the {note.noun} whose {note.phrase(label)} "
            f"is {_quoted(value)}?",
        )

    def filter_list(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "label", "measure")
        if picked is None:
            return None
        table, note = picked
        label, measure = note.label(), rng.choice(note.with_role("measure"))
        values = self.values(table, measure)
        if len(values) < 10:
            return None
        high = rng.random() < 0.5
        cut = (
            values[-rng.randint(2, min(40, len(values) // 3))]
            if high
            else values[rng.randint(1, min(40, len(values) // 3))]
        )
        op, word = (">", "greater than") if high else ("<", "less than")
        assert label is not None
        return Candidate(
            "filter_list",
            f"SELECT {label} FROM {table} WHERE {measure} {op} {_literal(cut)}",
            f"List the {note.phrase(label)} of every {note.noun} whose {note.phrase(measure)} "
            f"is {word} {cut}.",
        )

    def count_distinct(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "category")
        if picked is None:
            return None
        table, note = picked
        column = rng.choice(note.with_role("category"))
        return Candidate(
            "count_distinct",
            f"SELECT COUNT(DISTINCT {column}) FROM {table}",
            f"How many different values of {note.phrase(column)} occur among the {note.plural}"
            f" (not counting missing values)?",
        )

    def group_count(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "category")
        if picked is None:
            return None
        table, note = picked
        column = rng.choice(note.with_role("category"))
        phrase = note.phrase(column)
        where = f" WHERE {column} IS NOT NULL" if self.has_nulls(table, column) else ""
        skip = f" Ignore {note.plural} without a {phrase}." if where else ""
        return Candidate(
            "group_count",
            f"SELECT {column}, COUNT(*) FROM {table}{where} GROUP BY {column}",
            f"For each {phrase}, how many {note.plural} are there? "
            f"Return the {phrase} and the count.{skip}",
        )

    def top_k(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "label", "measure")
        if picked is None:
            return None
        table, note = picked
        label, measure = note.label(), rng.choice(note.with_role("measure"))
        k = rng.randint(1, 10)
        desc = rng.random() < 0.6
        direction, word, first = (
            ("DESC", "highest", "highest") if desc else ("ASC", "lowest", "lowest")
        )
        where = f" WHERE {measure} IS NOT NULL"
        if not self.no_ties(
            f"SELECT {measure} FROM {table}{where} ORDER BY {measure} {direction} LIMIT {k + 1}", k
        ):
            return None
        many = f"the {k} {note.plural}" if k > 1 else f"the {note.noun}"
        return Candidate(
            "top_k",
            f"SELECT {label} FROM {table}{where} ORDER BY {measure} {direction} LIMIT {k}",
            f"Give the {note.phrase(label)} of {many} with the {word} {note.phrase(measure)}"
            f"{f', {first} first' if k > 1 else ''}. Skip {note.plural} without a value for "
            f"{note.phrase(measure)}.",
        )

    def join_count(self, rng: random.Random) -> Candidate | None:
        fks = self.join_fks()
        if not fks:
            return None
        fk = rng.choice(fks)
        child, parent = self.notes.tables[fk.child], self.notes.tables[fk.parent]
        labels = self.unique_labels(fk.parent)
        if not labels:
            return None
        label, value = parent.label(), rng.choice(labels)
        return Candidate(
            "join_count",
            f"SELECT COUNT(*) FROM {fk.child} AS T1 JOIN {fk.parent} AS T2 "
            f"ON T1.{fk.column} = T2.{fk.parent_column} WHERE T2.{label} = {_literal(value)}",
            f"How many {child.plural} are linked{self.fk_phrase(fk)} to the {parent.noun} "
            f"whose {parent.phrase(label)} is {_quoted(value)}?",
        )

    def join_group(self, rng: random.Random) -> Candidate | None:
        fks = [fk for fk in self.join_fks() if self.labels_unique(fk.parent)]
        if not fks:
            return None
        fk = rng.choice(fks)
        child, parent = self.notes.tables[fk.child], self.notes.tables[fk.parent]
        label = parent.label()
        counts = sorted(
            {
                r[0]
                for r in self.rows(
                    f"SELECT COUNT(*) FROM {fk.child} WHERE {fk.column} IS NOT NULL "
                    f"GROUP BY {fk.column}"
                )
            }
        )
        if len(counts) < 3:
            return None
        threshold = counts[-rng.randint(2, min(len(counts), 15))]
        return Candidate(
            "join_group",
            f"SELECT T2.{label}, COUNT(*) FROM {fk.child} AS T1 JOIN {fk.parent} AS T2 "
            f"ON T1.{fk.column} = T2.{fk.parent_column} GROUP BY T2.{fk.parent_column} "
            f"HAVING COUNT(*) > {threshold}",
            f"Which {parent.plural} are linked{self.fk_phrase(fk)} to more than {threshold} "
            f"{child.plural}? Give each {parent.noun}'s {parent.phrase(label)} and its number "
            f"of {child.plural}.",
        )

    def join_agg_top(self, rng: random.Random) -> Candidate | None:
        fks = [
            fk
            for fk in self.join_fks()
            if self.labels_unique(fk.parent) and self.notes.tables[fk.child].with_role("measure")
        ]
        if not fks:
            return None
        fk = rng.choice(fks)
        child, parent = self.notes.tables[fk.child], self.notes.tables[fk.parent]
        label, measure = parent.label(), rng.choice(child.with_role("measure"))
        func = rng.choice(["SUM", "AVG", "MAX"])
        k = rng.randint(1, 5)
        body = (
            f"FROM {fk.child} AS T1 JOIN {fk.parent} AS T2 "
            f"ON T1.{fk.column} = T2.{fk.parent_column} "
            f"WHERE T1.{measure} IS NOT NULL GROUP BY T2.{fk.parent_column}"
        )
        if not self.no_ties(
            f"SELECT {func}(T1.{measure}) AS value {body} ORDER BY value DESC LIMIT {k + 1}", k
        ):
            return None
        which = f"Which {k} {parent.plural} have" if k > 1 else f"Which {parent.noun} has"
        return Candidate(
            "join_agg_top",
            f"SELECT T2.{label}, {func}(T1.{measure}) AS value {body} "
            f"ORDER BY value DESC LIMIT {k}",
            f"{which} the highest {AGGREGATES[func]} {child.phrase(measure)} over the "
            f"{child.plural} linked{self.fk_phrase(fk)} to {'them' if k > 1 else 'it'}? Give the "
            f"{parent.phrase(label)} and that {AGGREGATES[func]} value"
            f"{', highest first' if k > 1 else ''}.",
        )

    def group_having(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "category", "measure")
        if picked is None:
            return None
        table, note = picked
        column, measure = (
            rng.choice(note.with_role("category")),
            rng.choice(note.with_role("measure")),
        )
        sizes = sorted(
            {
                r[0]
                for r in self.rows(
                    f"SELECT COUNT(*) FROM {table} WHERE {column} IS NOT NULL GROUP BY {column}"
                )
            }
        )
        if len(sizes) < 3:
            return None
        least = sizes[-rng.randint(2, min(len(sizes), 12))]
        func = rng.choice(["AVG", "MAX", "MIN"])
        return Candidate(
            "group_having",
            f"SELECT {column}, {func}({measure}) FROM {table} WHERE {column} IS NOT NULL "
            f"GROUP BY {column} HAVING COUNT(*) >= {least}",
            f"For each {note.phrase(column)} shared by at least {least} {note.plural}, give the "
            f"{note.phrase(column)} and the {AGGREGATES[func]} {note.phrase(measure)} of those "
            f"{note.plural}.",
        )

    def above_average(self, rng: random.Random) -> Candidate | None:
        picked = self.tables_with(rng, "label", "measure", "category")
        if picked is None:
            return None
        table, note = picked
        label, measure = note.label(), rng.choice(note.with_role("measure"))
        column = rng.choice(note.with_role("category"))
        value = rng.choice(self.values(table, column))
        return Candidate(
            "above_average",
            f"SELECT {label} FROM {table} WHERE {column} = {_literal(value)} AND {measure} > "
            f"(SELECT AVG({measure}) FROM {table})",
            f"Which {note.plural} with {note.phrase(column)} {_quoted(value)} have a "
            f"{note.phrase(measure)} above the average {note.phrase(measure)} of all "
            f"{note.plural}? Give their {note.phrase(label)}.",
        )

    def no_children(self, rng: random.Random) -> Candidate | None:
        fks = self.join_fks()
        if not fks:
            return None
        fk = rng.choice(fks)
        child, parent = self.notes.tables[fk.child], self.notes.tables[fk.parent]
        label = parent.label()
        return Candidate(
            "no_children",
            f"SELECT {label} FROM {fk.parent} WHERE {fk.parent_column} NOT IN "
            f"(SELECT {fk.column} FROM {fk.child} WHERE {fk.column} IS NOT NULL)",
            f"Which {parent.plural} are not linked{self.fk_phrase(fk)} to any {child.noun}? "
            f"Give their {parent.phrase(label)}.",
        )

    def two_hop_count(self, rng: random.Random) -> Candidate | None:
        paths = [
            (first, second)
            for first in self.join_fks(require_label=False)
            for second in self.join_fks()
            if first.parent == second.child and second.parent != first.child
        ]
        if not paths:
            return None
        first, second = rng.choice(paths)
        start, middle, end = (
            self.notes.tables[t] for t in (first.child, first.parent, second.parent)
        )
        labels = self.unique_labels(second.parent)
        if not labels:
            return None
        label, value = end.label(), rng.choice(labels)
        return Candidate(
            "two_hop_count",
            f"SELECT COUNT(*) FROM {first.child} AS T1 JOIN {first.parent} AS T2 "
            f"ON T1.{first.column} = T2.{first.parent_column} JOIN {second.parent} AS T3 "
            f"ON T2.{second.column} = T3.{second.parent_column} "
            f"WHERE T3.{label} = {_literal(value)}",
            f"How many {start.plural} belong to {_a(middle.noun)}{self.fk_phrase(first)} that is "
            f"linked{self.fk_phrase(second)} to the {end.noun} whose {end.phrase(label)} is "
            f"{_quoted(value)}?",
        )


def _verify(conn: sqlite3.Connection, candidate: Candidate) -> bool:
    """The gold is fast, non-empty, small, has no all-NULL row, and no count of 0."""
    started = time.perf_counter()
    try:
        rows = run_query(conn, candidate.sql, timeout_s=GOLD_TIME_LIMIT_S).rows
    except QueryError:
        return False
    if time.perf_counter() - started >= GOLD_TIME_LIMIT_S:
        return False
    if candidate.family in COUNT_FAMILIES and rows == [(0,)]:
        return False
    return 0 < len(rows) <= MAX_GOLD_ROWS and all(any(v is not None for v in r) for r in rows)


def _candidates(db_id: str, seed: int) -> Iterator[Candidate]:
    database = resolve_database(db_id)
    assert database.notes is not None
    # the sampler is our code and reads PRAGMAs; the gold is verified on a guarded connection
    trusted = sqlite3.connect(f"{database.path.resolve().as_uri()}?mode=ro", uri=True)
    conn = open_readonly(database.path)
    try:
        sampler = Sampler(trusted, database.notes)
        for family, quota in QUOTAS.items():
            draw: Callable[[random.Random], Candidate | None] = getattr(sampler, family)
            kept: set[str] = set()
            for attempt in range(quota * _ATTEMPTS):
                if len(kept) >= quota:
                    break
                candidate = draw(random.Random(f"{seed}:{db_id}:{family}:{attempt}"))
                if candidate is None or candidate.sql in kept or not _verify(conn, candidate):
                    continue
                kept.add(candidate.sql)
                yield candidate
    finally:
        conn.close()
        trusted.close()


def _task(
    db_id: str, index: int, sql: str, question: str, source: str, split: str, **metadata: Any
) -> Task:
    return Task(
        id=f"{db_id}-{index:04d}" if source == "generated" else f"{db_id}-hand-{index:02d}",
        prompt=task_prompt(db_id, question),
        answer=sql,
        gold_actions=[
            GoldCall(name="run_sql", arguments={"query": sql}),
            GoldCall(name="submit_sql", arguments={"query": sql}),
        ],
        split=split,
        metadata={"db_id": db_id, "difficulty": hardness(sql), "source": source, **metadata},
    )


def hand_tasks() -> list[Task]:
    """The hand-written and hand-checked questions (``data/hand_tasks.yaml``), all in test."""
    text = resources.files("envhub_sql").joinpath("data/hand_tasks.yaml").read_text("utf-8")
    tasks = []
    for db_id, entries in yaml.safe_load(text).items():
        for index, entry in enumerate(entries, start=1):
            tasks.append(
                _task(db_id, index, entry["sql"].strip(), entry["question"], "hand", "test")
            )
    return tasks


def generate_tasks(seed: int = 0) -> list[Task]:
    """All shipped tasks: generated ones per database, then the hand-checked set."""
    tasks: list[Task] = []
    for db_id in ("chinook", "elements", "flights"):
        candidates = list(_candidates(db_id, seed))
        by_question: dict[str, set[str]] = {}
        for c in candidates:
            by_question.setdefault(c.question, set()).add(c.sql)
        index = 0
        for c in candidates:
            if len(by_question[c.question]) > 1:  # one question, two answers: ambiguous
                continue
            by_question[c.question] = set()  # keep the first of exact duplicates only
            split = "test" if index % TEST_EVERY == TEST_EVERY - 1 else "train"
            tasks.append(
                _task(db_id, index, c.sql, c.question, "generated", split, family=c.family)
            )
            index += 1
    return tasks + hand_tasks()


def write_jsonl(tasks: list[Task], path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for task in tasks:
            fh.write(
                json.dumps(task.model_dump(mode="json"), ensure_ascii=False, sort_keys=True) + "\n"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Regenerate envhub-rl-sql's shipped tasks.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(str(resources.files("envhub_sql").joinpath("data/tasks.jsonl"))),
    )
    args = parser.parse_args(argv)
    tasks = generate_tasks(args.seed)
    write_jsonl(tasks, args.out)
    print(f"wrote {len(tasks)} tasks to {args.out}")


if __name__ == "__main__":
    main()

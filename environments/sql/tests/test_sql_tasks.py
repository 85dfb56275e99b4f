"""The shipped task set: size, fixed ids, splits, tags, and byte-identical regeneration."""

from __future__ import annotations

from collections import Counter
from importlib import resources

from envhub_sql.generator import generate_tasks, write_jsonl
from envhub_sql.hardness import hardness

import envhub


def test_shipped_tasks_cover_databases_levels_and_splits() -> None:
    tasks = list(envhub.make("sql").tasks)
    assert len(tasks) >= 1000
    by_db = Counter(t.metadata["db_id"] for t in tasks)
    assert set(by_db) == {"chinook", "elements", "flights"} and min(by_db.values()) >= 250
    assert set(Counter(t.metadata["difficulty"] for t in tasks)) == {
        "easy",
        "medium",
        "hard",
        "extra",
    }
    assert {t.split for t in tasks} == {"train", "test"}
    hand = Counter(t.metadata["db_id"] for t in tasks if t.metadata["source"] == "hand")
    assert hand == {"chinook": 5, "elements": 5, "flights": 5}
    questions = [t.prompt[-1]["content"] for t in tasks]
    assert len(set(questions)) == len(questions), "a question must have exactly one gold query"


def test_regenerating_the_tasks_is_byte_identical(tmp_path) -> None:
    out = tmp_path / "tasks.jsonl"
    write_jsonl(generate_tasks(seed=0), out)
    shipped = resources.files("envhub_sql").joinpath("data/tasks.jsonl").read_bytes()
    assert out.read_bytes() == shipped


def test_hardness_follows_spider_levels() -> None:
    assert hardness("SELECT COUNT(*) FROM track WHERE genre_id = 1") == "easy"
    assert hardness("SELECT genre_id, COUNT(*) FROM track GROUP BY genre_id") == "medium"
    assert (
        hardness("SELECT name FROM artist WHERE artist_id NOT IN (SELECT artist_id FROM album)")
        == "hard"
    )
    assert (
        hardness(
            "SELECT T2.name, COUNT(*) FROM album AS T1 "
            "JOIN artist AS T2 ON T1.artist_id = T2.artist_id "
            "GROUP BY T2.artist_id HAVING COUNT(*) > 3"
        )
        == "extra"
    )

"""Spider- and BIRD-layout datasets from disk, with the same tools and rewards."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import envhub
from envhub import StepResult
from envhub.errors import InvalidRequest
from envhub.testing import check_environment

CallTool = Callable[..., Awaitable[StepResult]]  # the `call` fixture (conftest.py)

SPIDER_QUESTIONS = [
    {"db_id": "pets", "question": "How many pets are there?", "query": "SELECT count(*) FROM pet"},
    {
        "db_id": "pets",
        "question": "List the names of dogs.",
        "query": "SELECT name FROM pet WHERE species = 'dog'",
    },
    {
        "db_id": "pets",
        "question": "Which owner has the most pets? Give the owner's name.",
        "query": "SELECT T2.name FROM pet AS T1 JOIN owner AS T2 ON T1.owner_id = T2.owner_id "
        "GROUP BY T2.owner_id ORDER BY count(*) DESC LIMIT 1",
    },
    {
        "db_id": "shop",
        "question": "What is the most expensive item's price?",
        "query": "SELECT max(price) FROM item",
    },
]


def _make_databases(root: Path) -> None:
    (root / "pets").mkdir(parents=True)
    conn = sqlite3.connect(root / "pets" / "pets.sqlite")
    conn.executescript(
        """
        CREATE TABLE owner (owner_id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE pet (pet_id INTEGER PRIMARY KEY, name TEXT, species TEXT,
                          owner_id INTEGER REFERENCES owner (owner_id));
        INSERT INTO owner VALUES (1, 'Ada'), (2, 'Linus');
        INSERT INTO pet VALUES (1, 'Rex', 'dog', 1), (2, 'Tom', 'cat', 1), (3, 'Fido', 'dog', 2),
                               (4, 'Kitty', 'cat', 1);
        """
    )
    conn.commit()
    conn.close()
    (root / "shop").mkdir()
    conn = sqlite3.connect(root / "shop" / "shop.sqlite")
    conn.executescript(
        "CREATE TABLE item (item_id INTEGER PRIMARY KEY, price REAL);"
        "INSERT INTO item VALUES (1, 2.5), (2, 9.75);"
    )
    conn.commit()
    conn.close()


@pytest.fixture
def spider_layout(tmp_path: Path) -> tuple[Path, Path]:
    _make_databases(tmp_path / "database")
    tasks = tmp_path / "dev.json"
    tasks.write_text(json.dumps(SPIDER_QUESTIONS))
    return tasks, tmp_path / "database"


def test_spider_layout_gold_scores_one(spider_layout: tuple[Path, Path]) -> None:
    tasks, db_root = spider_layout
    report = check_environment("sql", tasks=str(tasks), db_root=str(db_root), comparator="spider")
    assert report.checked == 4


async def test_spider_layout_tools_and_wrong_answers(
    spider_layout: tuple[Path, Path], call: CallTool
) -> None:
    tasks, db_root = spider_layout
    env = envhub.make("sql", tasks=str(tasks), db_root=str(db_root))
    assert (await env.task_ids()) == ["dev-0", "dev-1", "dev-2", "dev-3"]
    session = await env.open("dev-1")
    assert "Database: pets\nQuestion: List the names of dogs." in session.task.prompt[-1]["content"]
    listing = (await call(session, "list_tables")).observations[0].content
    assert listing == "owner (2 rows)\npet (4 rows)"
    described = (await call(session, "describe_table", name="pet")).observations[0].content
    assert "REFERENCES owner (owner_id)" in described
    assert "Column notes" not in described  # Spider ships no column descriptions
    await call(session, "submit_sql", query="SELECT name FROM pet WHERE species = 'cat'")
    assert (await session.close()).reward == 0.0


def test_bird_layout_with_evidence(tmp_path: Path) -> None:
    _make_databases(tmp_path / "dev_databases")
    questions = [
        {
            "question_id": 7,
            "db_id": "shop",
            "question": "What is the cheapest price?",
            "evidence": "cheapest refers to MIN(price)",
            "SQL": "SELECT MIN(price) FROM item",
            "difficulty": "simple",
        }
    ]
    tasks = tmp_path / "dev.json"
    tasks.write_text(json.dumps(questions))
    env = envhub.make("sql", tasks=str(tasks), db_root=str(tmp_path / "dev_databases"))
    task = env.tasks.get("dev-7")
    assert task.prompt[-1]["content"].endswith("Hint: cheapest refers to MIN(price)")
    assert task.metadata == {"db_id": "shop", "source": "bird", "difficulty": "simple"}
    check_environment(env)


async def test_bird_column_descriptions_reach_describe_table(tmp_path: Path,
                                                             call: CallTool) -> None:
    root = tmp_path / "dev_databases"
    _make_databases(root)
    described = root / "shop" / "database_description"
    described.mkdir()
    # BIRD's files: Windows-1252 here, a file name in another case than the table's
    (described / "ITEM.csv").write_bytes(
        b"original_column_name,column_name,column_description,data_format,value_description\n"
        b"item_id,item id,the unique id of the item,integer,\n"
        b"price,,price in \x80 (euros)  before tax,real,\"0: free; commonsense: cheap < 5\"\n"
    )
    (described / "ghost.csv").write_text("original_column_name,column_name\nx,y\n")
    tasks = tmp_path / "dev.json"
    tasks.write_text(json.dumps([{"question_id": 1, "db_id": "shop", "question": "Cheapest?",
                                  "evidence": "", "SQL": "SELECT MIN(price) FROM item"}]))
    env = envhub.make("sql", tasks=str(tasks), db_root=str(root))
    session = await env.open("dev-1")
    described_item = (await call(session, "describe_table", name="item")).observations[0].content
    assert "Column notes:" in described_item
    assert "  item_id: item id: the unique id of the item (integer)" in described_item
    assert ("  price: price in \u20ac (euros) before tax (real) "
            "Values: 0: free; commonsense: cheap < 5") in described_item
    await session.close()


def test_bad_user_data_options_are_clear_errors(
    spider_layout: tuple[Path, Path], tmp_path: Path
) -> None:
    tasks, _ = spider_layout
    with pytest.raises(InvalidRequest, match="give both tasks="):
        envhub.make("sql", tasks=str(tasks))
    with pytest.raises(InvalidRequest, match="comparator must be one of"):
        envhub.make("sql", comparator="exact")
    empty_root = tmp_path / "empty"
    empty_root.mkdir()
    with pytest.raises(InvalidRequest, match=r"databases missing under .*: pets, shop"):
        envhub.make("sql", tasks=str(tasks), db_root=str(empty_root)).tasks  # noqa: B018

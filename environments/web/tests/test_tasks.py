"""The catalog and the task set are fixed functions of their seed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from envhub_web.catalog import Catalog, load_catalog
from envhub_web.shop_tasks import generate_shop_tasks

import envhub

_DIGEST = (
    "import hashlib, json, envhub;"
    "env = envhub.make('web', mode='text');"
    "rows = [t.model_dump(mode='json') for t in env.tasks];"
    "print(hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest())"
)


def test_web_taskset_has_fixed_ids_and_splits() -> None:
    env = envhub.make("web", mode="text")
    tasks = env.tasks
    assert len(tasks) >= 2000
    assert tasks.splits == ["test", "train"]
    assert len(tasks.split("test")) == len(tasks) // 5
    first = tasks.get("minishop-0-00000")
    assert first.gold_actions[-1].name == "finish"
    assert first.gold_actions[2].arguments["bid"] == f"product-{first.answer}"


def test_tasks_do_not_depend_on_hash_seed() -> None:
    digests = set()
    for hash_seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", _DIGEST],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_gold_query_puts_target_on_first_page() -> None:
    catalog = load_catalog(0, 3000)
    for task in generate_shop_tasks(catalog, 100):
        query = task.gold_actions[0].arguments["text"]
        first_page, total = catalog.page(query, 1)
        assert task.answer in [p.asin for p in first_page]
        assert total >= len(first_page)


def test_catalog_is_seeded() -> None:
    a, b, c = Catalog(seed=3, size=200), Catalog(seed=3, size=200), Catalog(seed=4, size=200)
    assert [p.asin for p in a.products] == [p.asin for p in b.products]
    assert [p.asin for p in a.products] != [p.asin for p in c.products]
    assert (
        hashlib.sha256(json.dumps([p.title for p in a.products]).encode()).hexdigest()
        == hashlib.sha256(json.dumps([p.title for p in b.products]).encode()).hexdigest()
    )


def test_search_pages_are_slices_of_the_ranking() -> None:
    catalog = load_catalog(0, 3000)
    ranking = catalog.search("cotton t-shirt")
    page2, total = catalog.page("cotton t-shirt", 2)
    assert page2 == ranking[10:20] and total == len(ranking)

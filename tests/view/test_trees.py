"""``envhub view`` walks a tree rollout (issue 33): an episode page names its tree, the
episode it was forked from and those forked from it, and shows the whole conversation
(the shared prefix its record does not store); the tree page nests every episode under
its parent. Read over HTTP from the real viewer app under uvicorn."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import envhub
from envhub.rollout import TreeConfig, make_branch_rule
from envhub.rollout.run import run_sync
from envhub.runtime.sync import run_sync as on_loop
from envhub.trajectory import read_records
from envhub.view.app import create_app
from envhub.view.catalog import Catalog
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import (
    ScriptConfig,
    ScriptedServer,
    ThreadedUvicorn,
    calc_script,
)


@pytest.fixture(scope="module")
def tree_viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("tree-run")
    output = root / "tree.jsonl"
    config = ScriptConfig(turns=calc_script(3), distinct_samples=True)
    with ScriptedServer(config) as server:
        policy = openai_policy(server.base_url)
        tree = TreeConfig(make_branch_rule("fixed:1"), factor=2, depth=2)
        run_sync(envhub.make("calc", num_tasks=10), policy, "0:1", tree=tree, output=output)
        on_loop(policy.aclose())
    catalog = Catalog([output], root / "cache")
    with ThreadedUvicorn(create_app(catalog), lifespan="on") as viewer:
        yield viewer.url, output
    catalog.close()


def _ids(page: str, element_id: str) -> list[int]:
    return [int(m) for m in re.findall(rf'id="{element_id}" href="/runs/0/episodes/(\d+)"', page)]


def test_episode_pages_link_parent_and_children_and_the_tree_page_nests_them(
    tree_viewer: tuple[str, Path],
) -> None:
    url, output = tree_viewer
    records = list(read_records(output))
    assert len(records) == 4
    episodes = httpx.get(f"{url}/api/runs/0/episodes").json()["episodes"]
    by_index = {e["sample_index"]: e["id"] for e in episodes}
    by_trajectory = {r["trajectory_id"]: by_index[r["sample_index"]] for r in records}

    for record in records:
        episode = by_index[record["sample_index"]]
        page = html.unescape(httpx.get(f"{url}/runs/0/episodes/{episode}").text)
        assert f'href="/runs/0/trees/{record["tree_id"]}"' in page
        parent = _ids(page, "parent-link")
        if record["parent_id"] is None:
            assert parent == [] and "· the root" in page
        else:
            assert parent == [by_trajectory[record["parent_id"]]]
            assert f"forked after turn {record['branch_turn']}" in page
        children = [int(m) for m in re.findall(
            r'class="child-link" href="/runs/0/episodes/(\d+)"', page)]  # fmt: skip
        expected = [by_trajectory[r["trajectory_id"]] for r in records
                    if r["parent_id"] == record["trajectory_id"]]  # fmt: skip
        assert sorted(children) == sorted(expected)
        for message in record["messages"]:  # the whole conversation, prefix included
            if message["role"] == "assistant" and message["content"]:
                assert message["content"] in page

    tree = html.unescape(httpx.get(f"{url}/runs/0/trees/{records[0]['tree_id']}").text)
    assert "4 episodes (leaves), 3 branch points" in tree
    nested = re.findall(r'<li class="tree-node" id="node-(\d+)">|(</li>)', tree)
    assert len([n for n, _ in nested if n]) == 4
    root_item = tree[tree.index(f'id="node-{by_index[0]}"'):]
    for record in records[1:]:  # every other episode is nested inside the root's item
        assert f'id="node-{by_trajectory[record["trajectory_id"]]}"' in root_item
    missing = httpx.get(f"{url}/runs/0/trees/nope")
    assert missing.status_code == 404

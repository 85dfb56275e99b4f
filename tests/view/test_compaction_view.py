"""``envhub view`` shows where and how an episode's context was compacted (issue 34): a
mark before the first message of each new context naming the segment, the strategy and
threshold, what it replaced, the summary and the new context; the tokens are labelled by
segment. Read over HTTP from the real viewer app under uvicorn."""

from __future__ import annotations

import html
from collections import deque
from pathlib import Path

import httpx

import envhub
from envhub.rollout import CompactionConfig
from envhub.rollout.run import run_sync
from envhub.runtime.sync import run_sync as on_loop
from envhub.trajectory import read_trajectories
from envhub.view.app import create_app
from envhub.view.catalog import Catalog
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import (
    ScriptConfig,
    ScriptedServer,
    ThreadedUvicorn,
    calc_script,
)

SUMMARY = "So far: 1 * 7 and 2 * 7 <computed>."


def test_the_episode_page_marks_each_compaction(tmp_path: Path) -> None:
    output = tmp_path / "compacted.jsonl"
    config = ScriptConfig(turns=calc_script(13), token_ids=True, replies=deque([SUMMARY]))
    with ScriptedServer(config) as server:
        policy = openai_policy(server.base_url)
        run_sync(envhub.make("calc", num_tasks=2, max_turns=12), policy, "0:1", max_turns=12,
                 output=output, compaction=CompactionConfig.of("turns:5", "summarize"))
        on_loop(policy.aclose())
    [trajectory] = read_trajectories(output)
    compactions = trajectory.compactions or []
    assert [c.turn for c in compactions] == [5, 10]
    catalog = Catalog([output], tmp_path / "cache")
    try:
        with ThreadedUvicorn(create_app(catalog), lifespan="on") as viewer:
            [episode] = httpx.get(f"{viewer.url}/api/runs/0/episodes").json()["episodes"]
            page = httpx.get(f"{viewer.url}/runs/0/episodes/{episode['id']}").text
    finally:
        catalog.close()
    assert "&lt;computed&gt;" in page and "<computed>" not in page  # the model's text, escaped
    text = html.unescape(page)
    assert '<div class="v">2</div><div class="k">context compactions</div>' in text
    for segment, compaction in enumerate(compactions, start=1):
        mark = text.index(f'id="compaction-{segment}"')
        assert (
            f"context compacted before turn {compaction.turn + 1} · segment {segment} · "
            f"<code>summarize</code> at <code>turns:5</code> · "
            f"{compaction.replaced_messages} messages → {len(compaction.messages)}"
        ) in text
        # the mark sits just before the first message the new context was followed by
        first_after = text.index(f'data-index="{compaction.message_index}"')
        assert mark < first_after
        assert text.rfind('data-index="', 0, first_after) < mark
    assert text.count(f"summary by scripted:</div><pre>{SUMMARY}</pre>") == 2
    assert "turn 6 · segment 1" in text and "turn 11 · segment 2" in text

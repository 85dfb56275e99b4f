"""``envhub view`` shows a run's pins (issue 32): the distribution and version of the
environment and the task-set hash its records carry, on the run page and on each
episode's page, read over HTTP from the real viewer app; a run written before envhub
recorded pins says so (tests/view/test_run_navigation.py's synthetic runs)."""

from __future__ import annotations

import html

import httpx

from envhub.trajectory import read_records
from tests.view.conftest import Viewer


def test_the_run_and_episode_pages_show_the_pins(viewer: Viewer) -> None:
    env = next(read_records(viewer.runs.reference))["env"]  # a real rollout of calc
    assert env["distribution"] == "envhub-rl-calc" and env["task_set_hash"].startswith("sha256:")
    page = html.unescape(httpx.get(f"{viewer.url}/runs/1").text)
    pinned = f"{env['distribution']} {env['distribution_version']}"
    assert f'<span id="pin-distribution">{pinned}</span>' in page
    assert f'<code id="pin-task-set">{env["task_set_hash"]}</code>' in page

    first = httpx.get(f"{viewer.url}/api/runs/1/episodes").json()["episodes"][0]["id"]
    episode = html.unescape(httpx.get(f"{viewer.url}/runs/1/episodes/{first}").text)
    card = episode[episode.index('class="card pins"'):]
    card = card[:card.index("</div></div>")]
    assert f"calc {env['version']}" in card and pinned in card
    assert env["task_set_hash"] in card

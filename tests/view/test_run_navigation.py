"""What the viewer's pages claim, read over HTTP from a real ``envhub view`` app: a capped
chart says it is capped, a run without token counts says so instead of drawing a bar at
0, compare links join only runs of one environment (and a compare of two environments
says so), and an episode page walks the list it was reached from; ``envhub report``
draws the same charts."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.view.app import create_app
from envhub.view.catalog import Catalog
from envhub.view.pages import PAGE_SIZE
from tests.rollout.scripted_server import ThreadedUvicorn
from tests.view.runs import minimal_record

TASKS = 60
EPISODES = 2 * TASKS
_ROW_LINK = re.compile(r'<tr class="episode-row">\s*<td class="num"><a href="([^"]+)"')


def _write(path: Path, count: int, tasks: int, *, env: str = "calc", tokens: bool = True) -> None:
    records = []
    for i in range(count):
        record = minimal_record(i, tasks)
        record["env"] = {"name": env, "version": "0.1.0"}
        if not tokens:
            record["usage"] = {"prompt_tokens": 0, "completion_tokens": 0}
        records.append(orjson.dumps(record) + b"\n")
    path.write_bytes(b"".join(records))


@dataclass(frozen=True)
class Site:
    url: str
    runs: list[Path]

    def get(self, path: str) -> str:
        response = httpx.get(self.url + path, timeout=30)
        assert response.status_code == 200, (path, response.text[:500])
        return response.text


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Run 0: calc, 60 tasks x 2 samples, token counts. Run 1: calc, 12 tasks, none
    recorded. Run 2: sql (its records name sql), 12 tasks."""
    root = tmp_path_factory.mktemp("navigation")
    runs = [root / "many-tasks.jsonl", root / "no-tokens.jsonl", root / "sql.jsonl"]
    _write(runs[0], EPISODES, TASKS)
    _write(runs[1], 12, 12, tokens=False)
    _write(runs[2], 12, 12, env="sql")
    catalog = Catalog(runs, root / "cache")
    with ThreadedUvicorn(create_app(catalog), lifespan="on") as server:
        yield Site(server.url, runs)
    catalog.close()


def _chart(page: str, key: str) -> str:
    start = page.index(f'id="chart-{key}"')
    return page[start : page.index("</svg>", start)]


def _link(page: str, element_id: str) -> str | None:
    found = re.search(rf'id="{element_id}"[^>]* href="([^"]+)"', page)
    return None if found is None else html.unescape(found.group(1))


def _episode_links(page: str) -> list[str]:
    return [html.unescape(href) for href in _ROW_LINK.findall(page)]


def test_a_capped_success_chart_says_how_many_tasks_it_shows(site: Site) -> None:
    chart = _chart(site.get("/runs/0"), "task_success")
    assert f"30 of {TASKS} tasks shown" in chart
    assert chart.count('<rect class="bar"') == 30
    uncapped = _chart(site.get("/runs/1"), "task_success")
    assert uncapped.count('<rect class="bar"') == 12 and "shown" not in uncapped


def test_a_run_without_token_counts_says_so_instead_of_a_bar_at_zero(site: Site) -> None:
    page = site.get("/runs/1")
    chart = _chart(page, "tokens")
    assert "no token counts recorded" in chart and '<rect class="bar"' not in chart
    assert '<div class="v" id="tokens">–</div>' in page  # not "0 / 0"
    counted = site.get("/runs/0")
    assert '<rect class="bar"' in _chart(counted, "tokens")  # 15 per episode
    assert '<div class="v" id="tokens">1200 / 600</div>' in counted


def test_the_report_says_what_the_run_page_says(site: Site, tmp_path: Path) -> None:
    pages = []
    for run in site.runs[:2]:
        out = tmp_path / f"{run.stem}.html"
        result = CliRunner().invoke(app, ["report", str(run), "-o", str(out),
                                          "--cache-dir", str(tmp_path / "cache")])
        assert result.exit_code == 0, result.output
        pages.append(out.read_text())
    assert f"30 of {TASKS} tasks shown" in _chart(pages[0], "task_success")
    assert "no token counts recorded" in _chart(pages[1], "tokens")


def test_a_run_written_before_pins_says_they_are_not_recorded(site: Site) -> None:
    page = site.get("/runs/1")
    assert '<span id="pin-distribution">no distribution recorded</span>' in page
    assert '<code id="pin-task-set">not recorded</code>' in page


def test_compare_links_join_only_runs_of_one_environment(site: Site) -> None:
    runs_page = site.get("/")
    pairs = re.findall(r'href="/compare\?a=(\d+)&amp;b=(\d+)"', runs_page)
    assert pairs == [("0", "1")]  # both calc; neither with the sql run
    assert "Runs compare only with runs of the same environment." in runs_page
    same = site.get("/compare?a=0&b=1")
    assert 'id="different-envs"' not in same
    asked_anyway = site.get("/compare?a=0&b=2")
    notice = asked_anyway[asked_anyway.index('id="different-envs"') :]
    assert notice.startswith('id="different-envs">Different environments: A is a run of calc, '
                             "B of sql.")
    # their ids coincide (task-00000 ...), yet no win, loss or tie is counted between them
    assert 'id="compare-table"' in same and 'id="compare-table"' not in asked_anyway
    assert 'id="wins"' not in asked_anyway


def test_previous_and_next_walk_the_list_the_episode_was_reached_from(site: Site) -> None:
    listing = "/runs/0/episodes?task=task-0000&sort=-reward"  # tasks 0-9: 20 episodes
    listed = _episode_links(site.get(listing))
    assert len(listed) == 20 and all(link.endswith("?task=task-0000&sort=-reward")
                                     for link in listed)
    walked, page = [listed[0]], site.get(listed[0])
    assert _link(page, "prev-episode") is None
    assert "episode 1 of 20 in" in page and _link(page, "back-to-list") == listing
    while (following := _link(page, "next-episode")) is not None:
        walked.append(following)
        page = site.get(following)
    assert walked == listed  # every episode of the list, in its order, once
    assert "episode 20 of 20 in" in page
    assert _link(page, "prev-episode") == listed[-2]


def test_an_episode_without_a_list_walks_the_run_in_file_order(site: Site) -> None:
    in_file_order = _episode_links(site.get("/runs/0/episodes"))
    page = site.get(in_file_order[1])
    assert "episode 2 of 120 in file order" in page
    assert (_link(page, "prev-episode"), _link(page, "next-episode")) == (
        in_file_order[0], in_file_order[2])
    # one further than the list's first page: "back" goes to the page that shows it
    second_page = _episode_links(site.get("/runs/0/episodes?sort=reward&page=2"))
    page = site.get(second_page[0])
    assert f"episode {PAGE_SIZE + 1} of {EPISODES} in" in page
    assert _link(page, "back-to-list") == "/runs/0/episodes?sort=reward&page=2"

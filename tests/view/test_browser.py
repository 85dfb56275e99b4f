"""``envhub view`` and ``envhub report`` in a real Chromium: the pages of a generated calc
run show the numbers of its summary, the filters, chat, token view and comparison work,
the live page follows appended lines, and the report opens with the network off.

Screenshots go to ``artifacts/screenshots/`` (kept by CI as artifacts)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from envhub.rollout.dispatcher import summary_path
from envhub.trajectory import read_records
from envhub.view.report import write_report
from tests.view.conftest import Viewer
from tests.view.runs import POLICY_VERSION

pytestmark = pytest.mark.chromium


@dataclass
class Watched:
    """A page whose requests and console errors are recorded."""

    page: Any
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    seen = Watched(page)
    page.on("request", lambda request: seen.requests.append(request.url))
    page.on("console", lambda m: seen.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: seen.errors.append(str(exc)))
    yield seen
    context.close()


def _summary(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(summary_path(path).read_text())
    return data


def _text(page: Any, selector: str) -> str:
    return str(page.locator(selector).inner_text()).strip()


def test_runs_run_episodes_episode_and_compare_pages(
    viewer: Viewer, watched: Watched, screenshots: Path
) -> None:
    page, runs = watched.page, viewer.runs
    summary = _summary(runs.scripted)
    records = list(read_records(runs.scripted))

    page.goto(f"{viewer.url}/")
    table = _text(page, "#runs")
    assert "scripted.jsonl" in table and "reference.jsonl" in table
    assert "not_found" in table and "is_directory" in table  # the bad arguments, named
    scripted_row = page.locator("#runs tbody tr").first.inner_text()
    assert str(POLICY_VERSION) in scripted_row.split("\t")[-2]  # policy versions column
    page.screenshot(path=screenshots / "runs.png", full_page=True)

    page.click("text=scripted.jsonl")
    assert _text(page, "#episodes") == str(summary["episodes"]) == "12"
    assert _text(page, "#scored") == str(summary["scored"])
    assert _text(page, "#masked") == str(summary["masked"]) == "1"
    assert _text(page, "#mean-reward") == f"{summary['mean_reward']:.3f}"
    assert _text(page, "#pass-at-2") == f"{summary['pass_at_k']['pass@2']:.3f}"
    assert _text(page, "#tasks") == str(summary["tasks"])
    assert page.locator("svg.chart").count() == 11
    assert page.locator("#chart-llm_request svg.chart").count() == 1  # per model request
    assert "90–100%" in _text(page, "#chart-over_time")  # reward by tenth of the run
    assert f"v{POLICY_VERSION}" in _text(page, "#chart-policy_version")
    assert page.locator("#tasks-table tbody tr").count() == summary["tasks"]
    page.screenshot(path=screenshots / "run.png", full_page=True)

    page.click("#all-episodes")
    assert _text(page, "#match-count") == "12 episodes"
    page.select_option("select[name=masked]", "false")
    page.select_option("select[name=tool]", "calculate")
    page.fill("input[name=turns_min]", "3")
    page.click("#apply")
    expected = [
        r for r in records
        if not r["masked"] and r["metrics"]["turns"] >= 3 and any(
            c["function"]["name"] == "calculate" for m in r["messages"]
            for c in m.get("tool_calls") or []
        )
    ]  # fmt: skip
    assert 0 < len(expected) < 12
    assert _text(page, "#match-count") == f"{len(expected)} episodes"
    assert page.locator("tr.episode-row").count() == len(expected)
    page.screenshot(path=screenshots / "episodes.png", full_page=True)

    # the episode whose first call was malformed: an error result, highlighted
    line = next(
        i for i, r in enumerate(records, 1)
        if any(str(m.get("content", "")).startswith("Error: ") for m in r["messages"])
    )  # fmt: skip
    page.goto(f"{viewer.url}/runs/0/episodes?sort=line")
    page.click(f"tr.episode-row:nth-child({line}) td:first-child a")
    error = page.locator(".msg.tool.error")
    assert error.count() == 1
    assert "arguments of calculate are not valid JSON" in error.inner_text()
    assert error.locator(".is-error").count() == 1
    calls = page.locator(".call").all_inner_texts()
    assert any("answer" in c and '"value": "20"' in c for c in calls)  # pretty JSON arguments
    record = records[line - 1]
    first_ids = record["turns"][-1]["completion_token_ids"]
    tokens = page.locator(".turn-tokens").last.locator("span.tok")
    assert tokens.count() == len(first_ids)
    assert str(tokens.first.get_attribute("title")).startswith("p=")
    page.screenshot(path=screenshots / "episode.png", full_page=True)

    page.goto(f"{viewer.url}/compare?a=0&b=1")
    assert _text(page, "#common") == "6"
    assert _text(page, "#losses") == "6" and _text(page, "#wins") == "0"  # reference wins all
    page.locator("a.side-link").first.click()
    assert page.locator("#side-A section.episode").count() == 2  # group of 2 samples
    assert page.locator("#side-B section.episode").count() == 2
    page.screenshot(path=screenshots / "compare.png", full_page=True)

    assert watched.errors == []
    assert watched.requests and all(u.startswith(viewer.url + "/") for u in watched.requests)


def test_live_page_follows_lines_as_they_are_appended(viewer: Viewer, watched: Watched) -> None:
    page, runs = watched.page, viewer.runs
    lines = runs.scripted.read_bytes().splitlines(keepends=True)
    page.goto(f"{viewer.url}/runs/3")
    assert _text(page, "#episodes") == "1"
    with open(runs.live, "ab") as fh:
        fh.write(lines[1][:40])  # a line still being written
        fh.flush()
        page.wait_for_selector("#pending", timeout=10_000)
        assert _text(page, "#episodes") == "1"
        fh.write(lines[1][40:] + lines[2])
    page.wait_for_function(
        "document.querySelector('#episodes').innerText.trim() === '3'", timeout=10_000
    )
    assert page.locator("#pending").count() == 0

    page.goto(f"{viewer.url}/runs/3/episodes")  # typing a filter while lines arrive
    assert _text(page, "#match-count") == "3 episodes"
    page.evaluate("window.notReloaded = true")
    page.fill("input[name=task]", "task-")
    with open(runs.live, "ab") as fh:
        fh.write(lines[3])
    page.wait_for_timeout(3_500)  # two polls: the page knows of the new line, and waits
    assert page.evaluate("window.notReloaded === true")
    assert page.input_value("input[name=task]") == "task-"
    page.locator("input[name=task]").evaluate("e => e.blur()")
    page.wait_for_function(
        "document.querySelector('#match-count').innerText.trim() === '4 episodes'",
        timeout=10_000,
    )
    assert watched.errors == []
    assert all(u.startswith(viewer.url + "/") for u in watched.requests)


def test_report_opens_offline_with_the_summary_numbers(
    viewer: Viewer, browser: Any, tmp_path: Path, screenshots: Path
) -> None:
    out = tmp_path / "report.html"
    write_report(viewer.runs.scripted, out, cache_dir=tmp_path / "cache", episodes=2)
    summary = _summary(viewer.runs.scripted)
    context = browser.new_context(offline=True)
    requests: list[str] = []
    context.route(
        "**/*",
        lambda route: (
            route.continue_() if route.request.url.startswith("file://") else route.abort()
        ),
    )
    page = context.new_page()
    page.on("request", lambda request: requests.append(request.url))
    page.goto(out.as_uri())
    assert _text(page, "#episodes") == str(summary["episodes"])
    assert _text(page, "#masked") == str(summary["masked"])
    assert _text(page, "#mean-reward") == f"{summary['mean_reward']:.3f}"
    assert _text(page, "#pass-at-1") == f"{summary['pass_at_k']['pass@1']:.3f}"
    assert page.locator("svg.chart").count() >= 8
    assert page.locator("section.episode").count() == 2 + 2 + 1  # worst, best, masked
    assert page.locator(".msg.tool").count() > 0
    page.screenshot(path=screenshots / "report.png", full_page=True)
    assert requests == [out.as_uri()]
    context.close()

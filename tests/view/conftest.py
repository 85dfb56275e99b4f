"""Shared fixtures of the viewer tests: the generated runs, one ``envhub view`` app under a
real uvicorn on 127.0.0.1, and one headless Chromium (Debian's, as the web environment
uses it) for the whole session."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envhub.view.app import create_app
from envhub.view.catalog import Catalog
from tests.rollout.scripted_server import ThreadedUvicorn
from tests.view.runs import reference_run, scripted_run

#: no request can leave 127.0.0.1: a proxy that is not there, and no name resolution
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--no-first-run",
    "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>;127.0.0.1",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]  # fmt: skip


def find_chromium() -> str | None:
    """Chromium and Playwright's Python package (the web plugin's dependency), or None."""
    if importlib.util.find_spec("playwright") is None:
        return None
    return os.environ.get("ENVHUB_CHROMIUM") or shutil.which("chromium")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chromium: needs Chromium (CI installs Debian's)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if find_chromium() is not None:
        return
    if os.environ.get("ENVHUB_REQUIRE_CHROMIUM") == "1":
        raise pytest.UsageError("ENVHUB_REQUIRE_CHROMIUM=1 but no Chromium was found")
    skip = pytest.mark.skip(reason="needs Chromium (apt-get install -y chromium) and playwright")
    for item in items:
        if "chromium" in item.keywords:
            item.add_marker(skip)


@dataclass(frozen=True)
class Runs:
    scripted: Path  # calc by the scripted model: token ids, a tool error, a masked episode
    reference: Path  # the same tasks by the reference policy
    broken: Path  # valid lines between bad ones, and a torn last line
    live: Path  # appended to by the tests
    missing: Path
    directory: Path

    def all(self) -> list[Path]:
        return [self.scripted, self.reference, self.broken, self.live, self.missing, self.directory]


BROKEN_LINES = 2  # valid trajectories in the broken file


def write_broken(source: Path, target: Path) -> None:
    good = source.read_bytes().splitlines(keepends=True)[:BROKEN_LINES]
    target.write_bytes(
        good[0]
        + b"this is not json\n"
        + b'{"task_id": "x", "schema_version": 1, "note": "\xff\xfe"}\n'
        + b'{"schema_version": 99, "task_id": "from-the-future"}\n'
        + good[1]
        + good[0][: len(good[0]) // 2]  # torn
    )


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("view-runs")
    made = Runs(
        scripted=root / "scripted.jsonl", reference=root / "reference.jsonl",
        broken=root / "broken.jsonl", live=root / "live.jsonl",
        missing=root / "missing.jsonl", directory=root / "a-directory",
    )  # fmt: skip
    scripted_run(made.scripted)
    reference_run(made.reference)
    write_broken(made.scripted, made.broken)
    made.live.write_bytes(made.scripted.read_bytes().splitlines(keepends=True)[0])
    made.directory.mkdir()
    return made


@dataclass(frozen=True)
class Viewer:
    url: str
    catalog: Catalog
    runs: Runs


@pytest.fixture(scope="session")
def viewer(runs: Runs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    catalog = Catalog(runs.all(), tmp_path_factory.mktemp("view-cache"))
    with ThreadedUvicorn(create_app(catalog), lifespan="on") as server:  # follows the files
        yield Viewer(server.url, catalog, runs)
    catalog.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = find_chromium()
    assert executable is not None
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS, timeout=60_000
        )
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    folder = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder

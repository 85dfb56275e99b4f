"""Shared test setup: the ``chromium`` marker and the no-leaked-browser check."""

from __future__ import annotations

import os

import pytest
from envhub_web import shutdown
from envhub_web.pool import find_chromium
from envhub_web.procs import chromium_pids


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chromium: needs Chromium (CI installs Debian's)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if find_chromium() is None:
        if os.environ.get("ENVHUB_REQUIRE_CHROMIUM") == "1":
            raise pytest.UsageError("ENVHUB_REQUIRE_CHROMIUM=1 but no Chromium was found")
        skip = pytest.mark.skip(reason="needs Chromium (apt-get install -y chromium)")
        for item in items:
            if "chromium" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def no_leaked_browsers():
    """After the whole suite, shutting down leaves no Chromium child processes."""
    assert not chromium_pids(), "Chromium processes existed before the suite"
    yield
    shutdown()
    assert not chromium_pids(), f"leaked Chromium processes: {sorted(chromium_pids())}"

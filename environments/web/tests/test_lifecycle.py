"""The browsers and the site server are the web environments' shared resources: they
open with the first browser episode and close through the ``Environment`` lifecycle
(``aclose_shared``), with no exit hook: leaving ``async with envhub.make(...)`` and the
end of ``envhub check`` leave no Chromium process behind while the process lives on."""

from __future__ import annotations

import pytest
from envhub_web.procs import chromium_pids
from typer.testing import CliRunner

import envhub
from envhub.cli import app

pytestmark = [pytest.mark.chromium, pytest.mark.usefixtures("earlier_clients_freed")]


async def test_leaving_async_with_make_stops_the_browsers() -> None:
    async with envhub.make("web", mode="browser") as env:
        session = await env.open("minishop-0-00004")
        assert chromium_pids(), "the episode should run in a browser"
        await session.close()
    assert not chromium_pids()


def test_envhub_check_in_browser_mode_leaves_no_chromium() -> None:
    result = CliRunner().invoke(
        app, ["check", "web", "--env-arg", "mode=browser", "--tasks", "test0:2"]
    )
    assert result.exit_code == 0, result.output
    assert not chromium_pids()

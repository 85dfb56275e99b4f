"""An environment that does not override ``load_tasks`` has one task, ``"default"``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import envhub
from envhub import Environment
from envhub.cli import app
from envhub.clients.remote import RemoteEnvironment
from envhub.server import create_app
from envhub.testing import serve_in_thread
from tests.core.game_envs import COUNTER_GAME, CounterGame


class Blank(Environment):
    """No data, no prompt: ``reset`` would write the first messages."""

    def reward(self) -> float:
        return 0.0


async def test_make_and_session_use_the_default_task() -> None:
    env = envhub.make(COUNTER_GAME)
    assert await env.task_ids() == ["default"] and env.tasks.splits == ["train"]
    async with env.open() as session:
        start = await session.reset()
        assert start.task_id == "default"
        assert start.messages == [{"role": "user", "content": CounterGame.default_prompt}]
    async with envhub.make(Blank).open("default") as blank:
        assert (await blank.reset()).messages == []


def test_info_shows_the_default_task() -> None:
    result = CliRunner().invoke(app, ["info", COUNTER_GAME, "--json"])
    assert result.exit_code == 0, result.stdout
    payload = json.loads(result.stdout)
    assert payload["tasks"] == 1 and payload["sample_task"]["id"] == "default"


async def test_a_server_lists_and_opens_the_default_task() -> None:
    with serve_in_thread(create_app([COUNTER_GAME])) as url:
        async with RemoteEnvironment(url, "counter-game") as remote:
            assert await remote.task_ids() == ["default"]
            async with remote.open() as session:
                assert session.task_id == "default" and session.messages

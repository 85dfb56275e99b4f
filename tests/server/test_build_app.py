"""``envhub.server.build_app``: the app ``envhub serve`` and every fleet replica run,
served by a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import pytest

from envhub.clients.remote import RemoteEnvironment
from envhub.errors import Unauthorized
from envhub.server import build_app, create_app
from envhub.testing import serve_in_thread
from tests.server.probe_env import ENV_ID as PROBE

CALC_CLASS = "envhub_calc:CalcEnv"  # the calc plugin by module:Class: the same name


async def test_the_app_hosts_each_env_with_its_options_and_budgets() -> None:
    app = build_app(["calc"], [{"num_tasks": 7}], max_turns=3, tool_timeout_s=2.0, token="t")
    with serve_in_thread(app) as url:
        async with RemoteEnvironment(url, "calc", token="t", http="httpx") as remote:
            info = await remote.info()
        async with RemoteEnvironment(url, "calc", http="httpx") as anonymous:
            with pytest.raises(Unauthorized):
                await anonymous.info()
    assert info.tasks == 7
    assert info.budgets.max_turns == 3 and info.budgets.tool_timeout_s == 2.0
    assert info.budgets.episode_timeout_s == 120.0  # calc's own default, not overridden


@pytest.mark.parametrize("envs", [["calc", "calc"], ["calc", CALC_CLASS]])
def test_an_environment_listed_twice_is_refused(envs: list[str]) -> None:
    """Two ids that name one environment: clients could reach only one of them. The
    check is one, whether the app is built from ids with options or from ids alone."""
    with pytest.raises(ValueError, match="'calc' is listed twice"):
        build_app(envs, [{}, {"num_tasks": 5}])
    with pytest.raises(ValueError, match="'calc' is listed twice"):
        create_app(envs)


def test_one_options_dict_per_environment() -> None:
    with pytest.raises(ValueError, match=r"shorter|longer"):
        build_app(["calc", PROBE], [{}])

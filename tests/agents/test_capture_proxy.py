"""The capture proxy, driven by the official ``openai`` client, in front of the scripted
model server (real uvicorn on 127.0.0.1): it forwards, records token data exactly as the
server returned it, and refuses what it cannot record with a clear error."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import httpx
import openai
import pytest

from envhub.agents import CaptureProxy
from envhub.errors import ContextLengthExceeded, PolicyError
from envhub.policies import SamplingParams
from tests.rollout.helpers import openai_policy
from tests.rollout.scripted_server import ScriptConfig, ScriptedServer, tokenize

CALCULATE = {
    "type": "function",
    "function": {
        "name": "calculate",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}


async def test_forwards_and_records_token_data(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted(ScriptConfig(token_ids=True))
    policy = openai_policy(server.base_url, sampling=SamplingParams(temperature=0.7))
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    try:
        async with CaptureProxy(policy, policy_version=lambda: 4) as proxy:
            client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=proxy.api_key)
            reply = await client.chat.completions.create(
                model="the-agents-own-name",
                messages=messages,  # type: ignore[arg-type]
                tools=[CALCULATE],  # type: ignore[list-item]
                temperature=0.0,
            )
            await client.close()
    finally:
        await policy.aclose()
    # the agent got the server's answer
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "calculate"  # type: ignore[union-attr]
    assert call.function.arguments == '{"expression": "2 + 3"}'  # type: ignore[union-attr]
    # the run's model and sampling replaced the agent's; token ids were asked for
    assert server.stats.models == {"scripted": 1}
    assert server.stats.token_fields_requested == 1
    [captured] = proxy.calls
    assert captured.messages == messages and captured.tools == [CALCULATE]
    assert captured.policy_version == 4
    completion = captured.completion
    assert completion.prompt_token_ids == tokenize(messages[0])
    expected_ids = tokenize(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "calculate",
                                         "arguments": '{"expression": "2 + 3"}'}}],
        }
    )
    assert completion.completion_token_ids == expected_ids
    assert completion.completion_logprobs == [-(i % 7) / 10 for i in range(len(expected_ids))]
    assert proxy.failure is None


async def test_refuses_what_it_cannot_record(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted()
    policy = openai_policy(server.base_url)
    try:
        async with CaptureProxy(policy) as proxy, httpx.AsyncClient() as http:
            url = f"{proxy.base_url}/chat/completions"
            auth = {"authorization": f"Bearer {proxy.api_key}"}
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            cases = [
                ({}, body, 401, "unauthorized"),
                ({"authorization": "Bearer wrong"}, body, 401, "unauthorized"),
                (auth, b"{not json", 400, "invalid_request"),
                (auth, {"model": "m", "messages": "hi"}, 400, "invalid_request"),
                (auth, {**body, "stream": True}, 400, "invalid_request"),
                (auth, {**body, "n": 3}, 400, "invalid_request"),
            ]
            for headers, payload, status, code in cases:
                response = await http.post(
                    url,
                    headers=headers,
                    **({"content": payload} if isinstance(payload, bytes) else {"json": payload}),
                )
                assert response.status_code == status, (payload, response.text)
                assert response.json()["error"]["code"] == code
            # none of them reached the model, and a good request still works
            assert server.stats.requests == 0
            assert (await http.post(url, headers=auth, json=body)).status_code == 200
    finally:
        await policy.aclose()
    assert len(proxy.calls) == 1 and proxy.failure is None


@pytest.mark.parametrize(
    ("fault", "status", "error"),
    [("500", 502, PolicyError), ("context", 400, ContextLengthExceeded)],
)
async def test_upstream_failure_ends_the_episode(
    scripted: Callable[..., ScriptedServer], fault: str, status: int, error: type[Exception]
) -> None:
    server = scripted(ScriptConfig(faults=deque([fault] * 10)))
    policy = openai_policy(server.base_url)  # retries a 500 four times, then gives up
    try:
        async with CaptureProxy(policy) as proxy:
            client = openai.AsyncOpenAI(
                base_url=proxy.base_url, api_key=proxy.api_key, max_retries=0
            )
            with pytest.raises(openai.APIStatusError) as raised:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
            assert raised.value.status_code == status
            # after a failure the proxy refuses at once, without asking the server again
            requests = server.stats.requests
            with pytest.raises(openai.APIStatusError) as again:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
            assert again.value.status_code == 503
            assert server.stats.requests == requests
            await client.close()
    finally:
        await policy.aclose()
    assert isinstance(proxy.failure, error)
    assert proxy.calls == []


async def test_unreachable_upstream_is_a_failure() -> None:
    dead = ScriptedServer().start()
    dead.stop()  # its port now refuses connections
    policy = openai_policy(dead.base_url)
    try:
        async with CaptureProxy(policy) as proxy, httpx.AsyncClient() as http:
            response = await http.post(
                f"{proxy.base_url}/chat/completions",
                headers={"authorization": f"Bearer {proxy.api_key}"},
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
    finally:
        await policy.aclose()
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"
    assert isinstance(proxy.failure, PolicyError)


async def test_messages_reach_the_server_in_plain_form(
    scripted: Callable[..., ScriptedServer],
) -> None:
    """A null assistant content (llama.cpp's server refuses it) and text-only content
    parts (agent frameworks send tool results so) reach the server, and the record, as
    envhub's own policy sends them."""
    server = scripted(ScriptConfig(token_ids=True))
    policy = openai_policy(server.base_url)
    call = {"id": "c1", "type": "function",
            "function": {"name": "calculate", "arguments": '{"expression": "2 + 3"}'}}
    sent = [
        {"role": "user", "content": [{"type": "text", "text": "What is"},
                                     {"type": "text", "text": "2 + 3?"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "5"}]},
    ]
    plain = [
        {"role": "user", "content": "What is\n2 + 3?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]
    try:
        async with CaptureProxy(policy, episode_id="ep-1") as proxy, httpx.AsyncClient() as http:
            response = await http.post(
                f"{proxy.base_url}/chat/completions",
                headers={"authorization": f"Bearer {proxy.api_key}"},
                json={"model": "m", "messages": sent},
            )
    finally:
        await policy.aclose()
    assert response.status_code == 200, response.text
    [captured] = proxy.calls
    assert captured.messages == plain
    assert server.stats.sessions == {"ep-1": 1}  # the episode's id in X-Session-ID
    assert captured.completion.endpoint == server.base_url
    assert captured.completion.prompt_token_ids == [t for m in plain for t in tokenize(m)]

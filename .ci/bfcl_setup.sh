#!/usr/bin/env bash
# Install bfcl-eval (BFCL v4's data, function backends and checkers) for envhub-rl-bfcl.
#
# Usage: .ci/bfcl_setup.sh [VENV]   (default: .venv)
#
# --no-deps: bfcl-eval declares a large pinned tree (numpy 1.26, faiss-cpu,
# sentence-transformers, a dozen vendor SDKs) that conflicts with envhub's; the parts
# envhub-rl-bfcl imports need only what its own pyproject declares (mpmath, tree_sitter
# 0.21, overrides, ...), installed with the plugin. Idempotent.
set -euo pipefail

VENV="${1:-.venv}"
BFCL_EVAL_VERSION="${BFCL_EVAL_VERSION:-2026.3.23}"

installed=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("bfcl-eval"))' 2>/dev/null || true)
if [ "$installed" != "$BFCL_EVAL_VERSION" ]; then
    bash "$(dirname "${BASH_SOURCE[0]}")/install.sh" "$VENV" --no-deps "bfcl-eval==$BFCL_EVAL_VERSION"
fi
# the data loads and both checkers import (no vendor SDK needed)
"$VENV/bin/python" -c 'from envhub_bfcl.checker import judge; judge("simple_python", "simple_python_0", [])'

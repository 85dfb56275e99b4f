#!/usr/bin/env bash
# Fixtures of envhub-rl-harbor's tests, downloaded once into $ENVHUB_CACHE/harbor/wheels:
# the terminal-bench wheel (its template task is a test fixture; the package itself needs
# Python 3.12, so it is only downloaded and read, never installed) and the pytest wheels
# the template's tests install offline inside the task container. Idempotent: pip finds
# the files already there and downloads nothing.
#
# Usage: .ci/harbor_setup.sh [VENV]   (default: .venv)
set -euo pipefail

VENV="${1:-.venv}"
TERMINAL_BENCH_VERSION="${TERMINAL_BENCH_VERSION:-0.2.18}"
DEST="${ENVHUB_CACHE:-$HOME/.cache/envhub}/harbor/wheels"
mkdir -p "$DEST"
if ! ls "$DEST"/terminal_bench-"$TERMINAL_BENCH_VERSION"-*.whl >/dev/null 2>&1; then
    "$VENV/bin/pip" download -q --no-deps --python-version 3.12 --only-binary :all: \
        -d "$DEST" "terminal-bench==$TERMINAL_BENCH_VERSION"
fi
# the task containers run Debian bookworm's python3 (3.11): pytest and its dependencies
if ! ls "$DEST"/pytest/pytest-8.4.1-*.whl >/dev/null 2>&1; then
    "$VENV/bin/pip" download -q --python-version 3.11 --only-binary :all: -d "$DEST/pytest" \
        "pytest==8.4.1"
fi

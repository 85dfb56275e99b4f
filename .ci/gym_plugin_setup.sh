#!/usr/bin/env bash
# Install gymnasium 0.29 beside a venv for the plugin entry-point test (tests/core/test_gym.py).
#
# Usage: .ci/gym_plugin_setup.sh [VENV]   (default: .venv)
#
# gymnasium 0.26-0.29 load the `gymnasium.envs` entry points on `import gymnasium`;
# gymnasium 1.x (what the [gym] extra installs) dropped that. So that the entry point is
# tested by the gymnasium that reads it, 0.29.1 goes into VENV/gymnasium-0.29 (--target,
# --no-deps: its dependencies are the venv's own), which the test puts first on PYTHONPATH
# of a fresh interpreter. Idempotent: exits early when it is already there.
set -euo pipefail

VENV="${1:-.venv}"
TARGET="$VENV/gymnasium-0.29"
if [ -f "$TARGET/gymnasium/envs/registration.py" ]; then
    echo "gym_plugin_setup: gymnasium 0.29 already in $TARGET"
    exit 0
fi
bash "$(dirname "${BASH_SOURCE[0]}")/install.sh" "$VENV" --no-deps --target "$TARGET" gymnasium==0.29.1
echo "gym_plugin_setup: gymnasium 0.29.1 in $TARGET"

#!/usr/bin/env bash
# The import layering: lint-imports over the contracts in [tool.importlinter] of pyproject.toml
# (or of the config file given as $1). import-linter reads the files under the package's own
# folder, and server/, sandboxes/ and rewards/ join envhub (as envhub.server etc.) only through
# setuptools' package-dir mapping; so, like .ci/typecheck.sh, this checks a tree of symlinks in
# the installed layout (.ci/installed_layout.sh). Exits non-zero when a contract is broken.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config="$(realpath "${1:-$root/pyproject.toml}")"
tree="$(mktemp -d)"  # one per run: the test suite runs this on several workers at once
trap 'rm -rf "$tree"' EXIT
bash "$root/.ci/installed_layout.sh" "$tree"
cd "$tree"
"$root/.venv/bin/lint-imports" "$config" --no-cache

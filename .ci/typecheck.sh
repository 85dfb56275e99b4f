#!/usr/bin/env bash
# Static type check of the envhub package with mypy (config: [tool.mypy] in pyproject.toml).
# server/, sandboxes/ and rewards/ import as envhub.server, envhub.sandboxes and envhub.rewards
# through setuptools' package-dir mapping, which mypy cannot follow. So this builds
# build/typecheck/envhub/, a tree of symlinks to the real files in the installed layout
# (.ci/installed_layout.sh), checks `-p envhub` there, and prints paths as they are in the
# repository. Exits non-zero on any error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tree="$root/build/typecheck"
bash "$root/.ci/installed_layout.sh" "$tree"
cd "$tree"
set +e
"$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" --cache-dir "$tree/.mypy_cache" \
    -p envhub "$@" > "$tree/report.txt" 2>&1
rc=$?
set -e
sed -E 's#^envhub/(server|sandboxes|rewards)/#\1/#' "$tree/report.txt"
exit "$rc"

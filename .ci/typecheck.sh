#!/usr/bin/env bash
# Static type check of the envhub package with mypy (config: [tool.mypy] in pyproject.toml).
# server/, sandboxes/ and rewards/ import as envhub.server, envhub.sandboxes and envhub.rewards
# through setuptools' package-dir mapping, which mypy cannot follow. So this builds
# build/typecheck/envhub/, a tree of symlinks to the real files in the installed layout, checks
# `-p envhub` there, and prints paths as they are in the repository. Exits non-zero on any error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tree="$root/build/typecheck"
rm -rf "$tree/envhub"
mkdir -p "$tree/envhub"
for entry in "$root"/envhub/*; do
    case "$(basename "$entry")" in __pycache__) continue ;; esac
    ln -s "$entry" "$tree/envhub/"
done
for sub in server sandboxes rewards; do ln -s "$root/$sub" "$tree/envhub/$sub"; done
cd "$tree"
set +e
"$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" --cache-dir "$tree/.mypy_cache" \
    -p envhub "$@" > "$tree/report.txt" 2>&1
rc=$?
set -e
sed -E 's#^envhub/(server|sandboxes|rewards)/#\1/#' "$tree/report.txt"
exit "$rc"

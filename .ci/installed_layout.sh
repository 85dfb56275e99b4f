#!/usr/bin/env bash
# Lay out the envhub package as it is installed, under $1/envhub: envhub/'s entries plus
# server/, sandboxes/ and rewards/ as envhub/server etc. (setuptools' package-dir mapping,
# which static tools that read a package's folder cannot follow). The entries are symlinks to
# the real files, so paths and edits stay the repository's. Used by typecheck.sh, layering.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tree="$1/envhub"
rm -rf "$tree"
mkdir -p "$tree"
for entry in "$root"/envhub/*; do
    case "$(basename "$entry")" in __pycache__) continue ;; esac
    ln -s "$entry" "$tree/"
done
for sub in server sandboxes rewards; do ln -s "$root/$sub" "$tree/$sub"; done

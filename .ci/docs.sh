#!/usr/bin/env bash
# Build the documentation site with --strict: a broken link, a missing page or anchor, or
# a Python reference mkdocstrings cannot resolve fails the build. The reference pages are
# generated from the code during the build (scripts/docs_reference.py), so this also checks
# that they still generate. Output goes to a temporary folder; nothing is published.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# the mkdocs-2 notices of mkdocs-material and of a dependency (a banner on every build)
export NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
site="$(mktemp -d)"
trap 'rm -rf "$site"' EXIT
.venv/bin/mkdocs build --strict --quiet --site-dir "$site"

#!/usr/bin/env bash
# envhub-rl-swe CI step (idempotent, run after .ci/sandbox_setup.sh): prepares the CI
# repositories (pinned sdists from PyPI, committed as reproducible base commits) and
# builds their sandbox images FROM envhub/python. Images are tagged by content hash,
# so a machine that kept them skips the build (~10 s per repository on a fresh one).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -m envhub_swe build --repos inflection,cachetools

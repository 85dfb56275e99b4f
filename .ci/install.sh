#!/usr/bin/env bash
# Install packages into a venv the way every CI stage does: with uv, handed this machine's
# pip configuration (indexes, find-links, constraints) and pip's rule of taking the best
# version from any index, so it resolves what pip would. uv downloads in parallel and
# links from its cache: the venv's ~260 packages install in 42 against 113 CPU-s and 62
# against 221 s on an empty cache. uv lives in the repository's .venv (put there by its
# pip the first time) and installs into any venv, the bridges' own ones included.
# Users' paths stay on pip: the wheels stage and the hub tests install with it.
#
# Usage: .ci/install.sh VENV [pip install arguments...]   (-e, --no-deps, --target, ...)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="$1"
shift
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q uv
export UV_INDEX_STRATEGY=unsafe-best-match
while IFS='=' read -r key value; do
  value="${value#\'}" && value="${value%\'}"
  case "${key##*.}" in
    index-url) export UV_INDEX_URL="$value" ;;
    extra-index-url) export UV_EXTRA_INDEX_URL="${UV_EXTRA_INDEX_URL:+$UV_EXTRA_INDEX_URL }$value" ;;
    find-links) export UV_FIND_LINKS="${UV_FIND_LINKS:+$UV_FIND_LINKS,}${value// /,}" ;;
    constraint) export UV_CONSTRAINT="${UV_CONSTRAINT:+$UV_CONSTRAINT }$value" ;;
  esac
done < <(.venv/bin/python -m pip config list)
exec .venv/bin/uv pip install -q --python "$venv/bin/python" "$@"

#!/usr/bin/env bash
# The environment plugins shipped in this repository, one place for CI and the quick start.
#   --pip-args   print "-e environments/NAME[EXTRAS] ..." for pip install (with the extras
#                the tests exercise)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
plugins=(calc sql search web swe mcp bfcl harbor openenv verifiers)
declare -A extras=([search]="[bm25s]" [swe]="[swebench]")
if [ "${1:-}" = "--pip-args" ]; then
  for name in "${plugins[@]}"; do printf -- '-e environments/%s%s ' "$name" "${extras[$name]:-}"; done
  echo
else
  printf '%s\n' "${plugins[@]}"
fi

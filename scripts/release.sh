#!/usr/bin/env bash
# Build the release artefacts: the sdist and wheel of envhub-rl and of every plugin under
# environments/ (envhub-rl-<name>), all at the version in VERSION, into one folder, then
# `twine check` them (metadata and the long description PyPI will render).
#
#   scripts/release.sh [DIST_DIR]     (default: dist/; emptied first)
#
# Each project is built from a clean copy of the checkout (tracked files and untracked
# ones git does not ignore), so no stale build/ or *.egg-info of an editable install can
# slip into a wheel, and each wheel is built from its sdist (python -m build's default), so
# a file missing from an sdist fails here rather than on a user's machine. Uses the build
# and twine of $PYTHON (default: .venv/bin/python; the `release` extra installs them);
# builds run without isolation, on the setuptools and wheel that envhub's test extra pins.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-$root/.venv/bin/python}"
out="$(realpath -m "${1:-dist}")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git ls-files -z --cached --others --exclude-standard | tar -c --null --ignore-failed-read -T - -f - 2>/dev/null | tar -x -C "$work"

rm -rf "$out"
mkdir -p "$out"
# one build per core at a time: each is a few seconds of setuptools, CPU-bound
build_one() {  # PROJECT (relative to the copy)
  local log="$work/build-${1//\//_}.log"
  "$PY" -m build --no-isolation --outdir "$out" "$work/$1" >"$log" 2>&1 \
    || { cat "$log" >&2; echo "release: building $1 failed" >&2; return 1; }
}
export -f build_one
export PY work out
printf '%s\0' . environments/*/ | xargs -0 -n 1 -P "$(nproc)" bash -c 'build_one "$0"'
"$PY" -m twine check --strict "$out"/*
echo "release: $(find "$out" -name '*.whl' | wc -l) wheels and $(find "$out" -name '*.tar.gz' | wc -l) sdists of $(cat VERSION) in $out"

#!/usr/bin/env bash
# Prebuild the environment images the tests in tests/images/ and tests/fleet use
# (run as root after .ci/sandbox_setup.sh, which starts dockerd and builds the `python`
# sandbox image). Idempotent: `envhub image build` is a no-op when the content tag exists.
# The wheels of the images' Python dependencies come from PyPI on the host, once, and are
# kept in $ENVHUB_CACHE/images/wheels; `docker build` itself runs without network.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENVHUB="${ENVHUB_BIN:-$REPO/.venv/bin/envhub}"
PY="${PYTHON:-$REPO/.venv/bin/python}"
# web is opt-in: its `chromium` base (Debian's Chromium, chroot apt-get) takes minutes;
# so is swe (about 3 min cold: its `bwrap` base, chroot apt-get bubblewrap, is built on
# the way, and its recipe's fetch step downloads the SWE sdists and wheels on the host)
IMAGES="${ENVHUB_ENV_IMAGES:-calc sql search}"

if [[ " $IMAGES " == *" web "* ]]; then
  "$PY" -m envhub.sandboxes.images build chromium
fi

for env in $IMAGES; do
  start=$(date +%s)
  tag=$("$ENVHUB" image build "$env")
  echo "$tag ($(($(date +%s) - start)) s)"
done

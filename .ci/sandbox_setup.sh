#!/usr/bin/env bash
# Prepare a fresh Debian bookworm CI machine (run as root) for the sandbox tests.
#
# Idempotent: installs what is missing, starts dockerd only if no engine answers,
# and builds the sandbox images only if their content-hash tag is absent.
# Network policy: only PyPI/Debian are reachable, so images come from debootstrap
# (see sandboxes/README.md); dockerd runs without a bridge or iptables rules, and every
# sandbox container uses network "none".
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
LOG="${DOCKERD_LOG:-/var/log/envhub-dockerd.log}"
IMAGES="${ENVHUB_SANDBOX_IMAGES:-base python}"

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" ca-certificates
fi

if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd (log: $LOG)"
  # setsid: the engine must outlive this script (and its process group) in CI
  setsid nohup dockerd --bridge=none --iptables=false --ip6tables=false >>"$LOG" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "dockerd did not come up; see $LOG" >&2; tail -n 50 "$LOG" >&2; exit 1; }
fi
echo "docker engine: $(docker version --format '{{.Server.Version}}')"

"$PY" -c 'import docker' 2>/dev/null || "$PY" -m pip install -q 'docker>=7'
"$PY" -c 'import envhub.sandboxes' 2>/dev/null || "$PY" -m pip install -q -e "$REPO"

for name in $IMAGES; do
  # `envhub sandbox build` is itself idempotent (content-hash tag); it prints the tag.
  "$PY" -m envhub.sandboxes.images build "$name"
done

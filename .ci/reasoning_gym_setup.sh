#!/usr/bin/env bash
# Install the envhub-rl-reasoning-gym plugin and Reasoning Gym into a venv.
#
# Usage: .ci/reasoning_gym_setup.sh [VENV]   (default: .venv)
#
# reasoning-gym 0.1.25 pins pyfiglet==1.0.2 (its figlet_font dataset draws with 1.0.2's
# fonts), while mendeleev 1.3.0 (envhub-rl-sql, envhub-rl-search) requires pyfiglet<0.9 and
# imports it only in its command-line tool. No single resolver run holds both, so the
# plugin and reasoning-gym go in with --no-deps, then reasoning-gym's other requirements
# (read from its metadata) with the resolver, then pyfiglet 1.0.2 with --no-deps (pip
# warns that mendeleev's pin is broken: the sql and search environments never import
# pyfiglet). Idempotent: exits early when all of it is in place; a later resolver run
# that puts pyfiglet 0.8 back (the main install on a rerun) is undone here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${1:-.venv}"
PY="$VENV/bin/python"
in_place() {
    "$PY" - <<'PYEOF' 2>/dev/null
import importlib.metadata as m
assert m.version("reasoning_gym") == "0.1.25" and m.version("pyfiglet") == "1.0.2"
m.version("envhub-rl-reasoning-gym")
import reasoning_gym  # noqa: F401  (its other requirements are there)
PYEOF
}
if in_place; then
    echo "reasoning_gym_setup: reasoning-gym 0.1.25 and pyfiglet 1.0.2 already in place"
    exit 0
fi
bash .ci/install.sh "$VENV" --no-deps -e environments/reasoning_gym reasoning-gym==0.1.25
mapfile -t requirements < <("$PY" - <<'PYEOF'
import importlib.metadata as m
for requirement in m.requires("reasoning_gym") or []:
    if "extra ==" not in requirement and not requirement.startswith("pyfiglet"):
        print(requirement)
PYEOF
)
bash .ci/install.sh "$VENV" "${requirements[@]}"
bash .ci/install.sh "$VENV" --no-deps pyfiglet==1.0.2
in_place
echo "reasoning_gym_setup: reasoning-gym 0.1.25 (pyfiglet 1.0.2) and envhub-rl-reasoning-gym"

#!/usr/bin/env bash
# The release artefacts, tested the way users get them (issue 31): build the sdists and
# wheels (scripts/release.sh, which runs twine check), check that every file of each
# package's source tree is in its wheel, serve them from a real package index (pypiserver)
# on 127.0.0.1, `pip install envhub-rl envhub-rl-calc envhub-rl-sql` from it into a fresh
# venv, and run the light path there: the core install without extras checks calc and
# sql and rolls out calc with the reference policy; `envhub serve` names the extra it
# needs, and with envhub-rl[server] a served rollout scores its episodes. Editable installs
# read the source tree and so hide package data missing from a wheel; this does not.
#
# Dependencies come through the machine's own index configuration (PyPI, its extra
# indexes, pip's cache), envhub's distributions from the local index only: no index
# elsewhere has them, and the install log must show them downloaded from it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-$PWD/.venv/bin/python}"
version="$(cat VERSION)"
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() {  # URL PID LOG: until URL answers, while PID lives
  for _ in $(seq 1 120); do
    "$PY" -c "import urllib.request as u; u.urlopen('$1', timeout=2)" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; echo "wheels: $1 never answered" >&2; return 1; }
    sleep 0.5
  done
  cat "$3" >&2; echo "wheels: $1 never answered" >&2; return 1
}
fail() { echo "wheels: $*" >&2; exit 1; }

bash scripts/release.sh "$work/dist"

# every file git tracks in a package's source folder is in its wheel (package data:
# task files, templates, seccomp profiles, image recipes); READMEs and tests excepted
"$PY" - "$work/dist" <<'PYEOF'
import subprocess, sys, tomllib, zipfile
from pathlib import Path

dist = Path(sys.argv[1])
def tracked(folder: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", folder],
                         capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if not f.endswith(".md") and "/tests/" not in f]

def check(wheel: Path, folders: dict[str, str]) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f"{source}{path.removeprefix(source)}" for source, target in folders.items()
               for path in tracked(source) if target + path.removeprefix(source) not in names]
    if missing:
        sys.exit(f"wheels: {wheel.name} lacks files of its source tree: {missing}")

core = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
check(next(dist.glob("envhub_rl-*.whl")),
      {f"{folder}/": package.replace(".", "/") + "/" for package, folder in core.items()})
for pyproject in sorted(Path("environments").glob("*/pyproject.toml")):
    meta = tomllib.loads(pyproject.read_text())
    wheel = next(dist.glob(meta["project"]["name"].replace("-", "_") + "-*.whl"))
    top = {p.split(".")[0] for p in meta["tool"]["setuptools"]["packages"]}
    check(wheel, {f"{pyproject.parent}/{package}/": f"{package}/" for package in top})
print(f"wheels: every packaged source file is in the {len(list(dist.glob('*.whl')))} wheels")
PYEOF

index_port="$(free_port)"
"$PY" -m pypiserver run --host 127.0.0.1 --port "$index_port" --disable-fallback \
  "$work/dist" >"$work/index.log" 2>&1 &
pids+=($!)
index="http://127.0.0.1:$index_port/simple/"
wait_for "${index}envhub-rl/" "${pids[-1]}" "$work/index.log"

python3 -m venv "$work/venv"
bin="$work/venv/bin"
# the machine's extra indexes, with ours added (a command-line option replaces the config's)
extra=(--extra-index-url "$index")
for url in $("$bin/pip" config get global.extra-index-url 2>/dev/null || true); do
  extra+=(--extra-index-url "$url")
done
install() {  # REQUIREMENT...: from the indexes, each of these from ours
  "$bin/pip" install --disable-pip-version-check "${extra[@]}" "$@" >"$work/pip.log" 2>&1 \
    || { cat "$work/pip.log" >&2; fail "pip install $* failed"; }
  for requirement in "$@"; do
    wheel="$(echo "${requirement%%[\[=]*}" | tr - _)-$version-py3-none-any.whl"
    grep -q "127.0.0.1:$index_port/packages/$wheel" "$work/pip.log" \
      || { cat "$work/pip.log" >&2; fail "$wheel did not come from the local index"; }
  done
}
install "envhub-rl==$version" "envhub-rl-calc==$version" "envhub-rl-sql==$version"
"$bin/pip" show --files envhub-rl >"$work/files.txt"
grep -q "envhub/environment_images/recipes/calc.yaml" "$work/files.txt" \
  || fail "the installed envhub-rl lacks its image recipes"

cd "$work"  # nothing of the checkout on sys.path from here on
"$bin/envhub" --version | tee versions.txt
grep -qx "envhub-rl $version" versions.txt || fail "--version does not name envhub-rl $version"
grep -qx "envhub-rl-calc $version (calc)" versions.txt || fail "--version lacks envhub-rl-calc"
grep -qx "envhub-rl-sql $version (sql)" versions.txt || fail "--version lacks envhub-rl-sql"

# the light path on the core install (no extras)
"$bin/envhub" check calc
"$bin/envhub" check sql --tasks test
"$bin/envhub" rollout calc --policy reference --tasks test0:8 --group-size 2 -o inproc.jsonl
set +e
"$bin/envhub" info nosuchenv >unknown.txt 2>&1; unknown=$?
"$bin/envhub" info search >uninstalled.txt 2>&1; uninstalled=$?
"$bin/envhub" serve calc --port "$(free_port)" >serve.txt 2>&1; serve=$?
set -e
tr -s ' \n' ' ' <unknown.txt | grep -q "pip install envhub-rl-bfcl (bfcl)" && [ "$unknown" -eq 2 ] \
  && ! grep -q "envhub-nosuchenv\|envhub-rl-nosuchenv" unknown.txt \
  || { cat unknown.txt >&2; fail "envhub info nosuchenv does not name envhub's own plugins"; }
tr -s ' \n' ' ' <uninstalled.txt | grep -q "it is envhub's own plugin: pip install envhub-rl-search" \
  && [ "$uninstalled" -eq 2 ] \
  || { cat uninstalled.txt >&2; fail "envhub info search does not name envhub-rl-search"; }
[ "$serve" -ne 0 ] && grep -q "pip install 'envhub-rl\[server\]'" serve.txt \
  || { cat serve.txt >&2; fail "envhub serve on the core install does not name envhub-rl[server]"; }
"$bin/envhub" init demo --dir demo >/dev/null && [ -f demo/pyproject.toml ] \
  || fail "envhub init did not write a plugin"

# a served rollout: the server extra, then the client over HTTP (the core has no aiohttp)
"$bin/pip" install --disable-pip-version-check "${extra[@]}" "envhub-rl[server]==$version" \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; fail "pip install envhub-rl[server] failed"; }
env_port="$(free_port)"
"$bin/envhub" serve calc --port "$env_port" >env.log 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$env_port/health" "${pids[-1]}" env.log
"$bin/envhub" rollout calc --policy reference --env-url "http://127.0.0.1:$env_port" \
  --tasks test0:8 --group-size 2 -o served.jsonl
"$bin/python" - <<'PYEOF'
import json
for run in ("inproc", "served"):
    summary = json.load(open(f"{run}.jsonl.summary.json"))
    assert summary["episodes"] == 16 and summary["masked"] == 0, (run, summary)
    assert summary["mean_reward"] == 1.0, (run, summary)
print("wheels: the reference policy scored 16 of 16 episodes in process and served")
PYEOF
echo "wheels: envhub-rl $version from the local index passed check, serve and rollout"

#!/usr/bin/env bash
# envhub quick start: set up a venv with envhub, the calc plugin and a local SmolLM2-135M
# model server (llama.cpp), validate calc's rewards, then run `envhub rollout calc` with the
# reference policy and against the local model. Re-running resumes instead of redoing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# shellcheck source=.ci/heartbeat.sh
source .ci/heartbeat.sh
echo "==> installing envhub and the calc plugin into .venv"
heartbeat "installing envhub" .venv/bin/pip install -q -e '.[server,rollout,view]' -e environments/calc
bash .ci/local_llm_setup.sh .venv          # llama-cpp-python (built from source once) + SmolLM2
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p runs

echo "==> envhub check calc (reference policy must score 1, a no-op 0)"
envhub check calc --tasks test

echo "==> reference policy on the test split"
envhub rollout calc --policy reference --tasks test --group-size 2 --resume -o runs/calc-reference.jsonl

port="${ENVHUB_LLM_PORT:-8080}"
echo "==> starting SmolLM2-135M on 127.0.0.1:$port"
envhub llm serve --port "$port" > runs/llm-server.log 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  .venv/bin/python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat runs/llm-server.log; exit 1; }
  sleep 1
done

echo "==> envhub rollout calc against the local model"
# temperature 0: sampled, this 135M model writes runaway tool-call arguments (the server
# ignores max_tokens there, envhub/cli/llama_server.py) until a prompt no longer fits its context
envhub rollout calc --model smollm2-135m --base-url "http://127.0.0.1:$port/v1" \
  --tasks 0:4 --group-size 2 --max-turns 4 --max-tokens 96 --temperature 0 \
  --resume -o runs/calc-smollm2.jsonl
echo "trajectories: runs/calc-reference.jsonl runs/calc-smollm2.jsonl (summaries: *.summary.json)"
echo "look at them: .venv/bin/envhub view runs/calc-reference.jsonl runs/calc-smollm2.jsonl"

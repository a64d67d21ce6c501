#!/bin/bash
# Round 17, b06 (copied from the blind round's /tmp/r17/b06.sh, run against this checkout: REPO, PY override):
# a run stopped gracefully; before resume-training a link is planted where the resumed trainer saves its next
# checkpoint (checkpoints/checkpoint-<k+1>/trainer_state.json -> a file outside the workspace). Prints BROKEN when
# the outside file is overwritten, else HELD (now: the resume is refused by the logs gate, naming the link).
# usage: b06_checkpoint_link.sh [WS]  (trains a few CPU steps of the tiny model: minutes)
set -u
HERE=$(cd "$(dirname "$0")" && pwd); REPO=${REPO:-$(cd "$HERE/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}
export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/r17b/ws_b06}; OUT=$WS.outside
R=$(STEPS=10 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"
CLI="$PY -m mcp_server.cli"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
for i in $(seq 1 120); do ls "$R/checkpoints" 2>/dev/null | grep -q checkpoint-2 && break; sleep 2; done
timeout 600 $CLI stop-training "$R" > stop.log 2>&1; echo "stop rc=$? $(grep -v '^  \.\.\.' stop.log | head -1 | cut -c1-160)"
K=$(ls "$R/checkpoints" | sed -n 's/^checkpoint-//p' | sort -n | tail -1); N=$((K + 1))
rm -rf "$OUT"; mkdir -p "$OUT"; printf 'a file of the person, outside the workspace\n' > "$OUT/victim.json"
mkdir -p "$R/checkpoints/checkpoint-$N"; ln -s "$OUT/victim.json" "$R/checkpoints/checkpoint-$N/trainer_state.json"
echo "stopped at checkpoint-$K; planted checkpoint-$N/trainer_state.json -> $OUT/victim.json"
timeout 600 $CLI resume-training "$R" > resume.log 2>&1; echo "resume rc=$? $(grep -v '^  \.\.\.' resume.log | head -2 | cut -c1-240)"
st=none
for i in $(seq 1 120); do
  st=$(timeout 60 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
echo "state=$st"
echo "outside file now ($(stat -c %s "$OUT/victim.json") bytes): $(head -c 160 "$OUT/victim.json" | tr '\n' ' ')"
grep -q "a file of the person" "$OUT/victim.json" && echo HELD || echo BROKEN

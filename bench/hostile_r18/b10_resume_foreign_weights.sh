#!/bin/bash
# Round 18 (copied from the blind round's /tmp/r18/breaks/, run against this checkout: REPO, PY override).
# r18 b10 (forged result: a resume from weights the run never wrote): b09's gap on the resume door. The racer
# replaces each checkpoint-N/model.safetensors right after the trainer creates it (the SFT warm start's weights, same
# shapes), the trainer's own save record hashes the file from disk and signs it; the run is stopped gracefully and
# resume-training checks the checkpoint against that ledger (confirm_resume_checkpoint, ResumedWeights: both pass)
# and trains on from the foreign weights to "succeeded". The resumed steps' completions are the warm start's
# (<reasoning> tags), which the untrained tiny model never writes.
# Exit 1 while the break exists (resumed, succeeded, completions after the resume carry the warm start's tags), 0
# once fixed (the resume refused). usage: b10_resume_foreign_weights.sh [WS]
set -u
HERE=$(cd "$(dirname "$0")" && pwd); REPO=${REPO:-$(cd "$HERE/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}
export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/hostile_r18_b10ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=10 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
state() { timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null; }
W=$REPO/mcp_server/tiny_warm_start/model.safetensors
rm -f "$WS.racer.log"; "$PY" "$HERE/ckpt_racer.py" "$R/checkpoints" "$W" "$WS.racer.log" & RACER=$!
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
for i in $(seq 1 150); do ls "$R/checkpoints" 2>/dev/null | grep -q checkpoint-2 && break; sleep 1; done
timeout 600 $CLI stop-training "$R" > stop.log 2>&1; echo "stop rc=$? $(head -1 stop.log | cut -c1-120)"
for i in $(seq 1 60); do st=$(state); case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done; echo "state=$st"
kill $RACER 2>/dev/null; echo "racer: $(tr '\n' ' ' < "$WS.racer.log" | cut -c1-300)"
before=$(ls "$R/checkpoints/completions" | wc -l)
timeout 900 $CLI resume-training "$R" > resume.log 2>&1; echo "resume rc=$? $(grep -v '^  \.\.\.' resume.log | head -1 | cut -c1-200)"
for i in $(seq 1 120); do st=$(state); case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done; echo "state after resume=$st"
grep -m1 "refusing" "$R/train/logs/stdout.log" | cut -c1-300
n=$($PY - "$R" "$before" <<'PY'
import glob, sys, pyarrow.parquet as pq
files = sorted(glob.glob(sys.argv[1] + "/checkpoints/completions/*.parquet"))[int(sys.argv[2]):]
texts = [str(c) for f in files for c in pq.read_table(f).column("completion").to_pylist()]
print(sum("reasoning" in t for t in texts))
PY
)
echo "completions logged after the resume carrying the warm start's <reasoning> tags: $n"
[ "$st" = succeeded ] && [ "${n:-0}" -gt 0 ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

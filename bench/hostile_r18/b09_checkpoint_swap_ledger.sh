#!/bin/bash
# Round 18 (copied from the blind round's /tmp/r18/breaks/, run against this checkout: REPO, PY override).
# r18 b09 (forged result: a checkpoint the run never wrote, vouched for by the signed ledger): the trainer's save
# record (digest.record_save) hashes a checkpoint's files FROM DISK after the Trainer wrote them (optimizer, scheduler,
# rng and trainer_state are written in between) and signs those hashes into train/logs/saves.jsonl. A racer replaces
# checkpoint-N/model.safetensors with other weights of the same shapes (here the SFT warm start's) right after the
# trainer creates it: the ledger vouches for them. promote-checkpoint --checkpoint checkpoint-1 then judges weights
# the run never trained and signs PROMOTE; a resume from it would load them too (the ledger is what it checks).
# Exit 1 while the break exists (ledger hash = the foreign weights', signed PROMOTE), 0 once fixed.
# usage: b09_checkpoint_swap_ledger.sh [WS]
set -u
HERE=$(cd "$(dirname "$0")" && pwd); REPO=${REPO:-$(cd "$HERE/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}
export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/hostile_r18_b09ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=3 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
W=$REPO/mcp_server/tiny_warm_start/model.safetensors
rm -f "$WS.racer.log"; "$PY" "$HERE/ckpt_racer.py" "$R/checkpoints" "$W" "$WS.racer.log" & RACER=$!
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
kill $RACER 2>/dev/null; echo "training: $st; racer: $(head -1 "$WS.racer.log")"
"$PY" - "$R" "$W" <<'PY'
import hashlib, json, sys
run, w = sys.argv[1:3]
foreign = hashlib.sha256(open(w, "rb").read()).hexdigest()
for line in open(run + "/train/logs/saves.jsonl"):
    d = json.loads(line)
    sha = (d.get("files") or {}).get("model.safetensors", {}).get("sha256")
    print(f"ledger {d.get('save')}: model.safetensors {str(sha)[:12]}{'  = the foreign weights' if sha == foreign else ''}; signed: {'mac' in d}")
PY
timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens tiny --max-new-tokens 48 > baseline.log 2>&1; echo "baseline: $(grep -m1 passed baseline.log | cut -c1-120)"
timeout 900 $CLI promote-checkpoint "$R" --checkpoint checkpoints/checkpoint-1 > promote.log 2>&1; echo "promote checkpoint-1 rc=$?"
grep -E '^(PROMOTE|REJECT)|^  goldens:' promote.log | cut -c1-260
v=$("$PY" -c "import json; d=json.load(open('$R/promotion.json')); print(d.get('verdict'), 'mac' in d)" 2>/dev/null)
echo "promotion.json: $v"
[ "$v" = "PROMOTE True" ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

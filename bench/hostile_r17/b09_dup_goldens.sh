#!/bin/bash
# b09 (round 17): a goldens file repeating ONE item 21 times: the exact McNemar test counted 21 independent gains
# and promote-checkpoint said PROMOTE at p = 9.5e-7. The contract: a goldens file in which one prompt comes twice
# (compared normalised: case, whitespace, zero-width characters, NFKC; text as one user message) is refused by
# evaluate-model, the baseline and promote-checkpoint, naming the repeated rows.
# usage: b09_dup_goldens.sh [WS] (WS: a workspace with a succeeded run runs/*-r; built through
# ../hostile_r16/setup.sh and trained when WS holds none). Prints HELD when both doors refuse, for the exact copies
# and for copies that differ only in case and whitespace; BROKEN on a PROMOTE.
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export REPO PYTHONPATH=$REPO
WS=${1:-/tmp/r17b09/ws}; CLI="$PY -m mcp_server.cli"
if [ ! -d "$WS/runs" ]; then
  R=$(timeout 1200 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
  (cd "$WS" && LLM_FINETUNING_WORKSPACE="$WS" timeout 600 $CLI launch-training "$R" > launch.log 2>&1)
  for i in $(seq 1 120); do
    st=$(cd "$WS" && LLM_FINETUNING_WORKSPACE="$WS" timeout 60 $CLI training-status "$R" --json 2>/dev/null \
         | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
    case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
  echo "training: $st"
fi
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; R=$(ls -d "$WS"/runs/*-r)
for i in $(seq 1 21); do sed -n 75p data.jsonl; done > goldens-dup.jsonl
$PY - data.jsonl goldens-near.jsonl <<'PY'
import json, sys
row = json.loads(open(sys.argv[1]).read().splitlines()[74])
text = row["prompt"][-1]["content"]
rows = [{**row, "prompt": [{"role": "user", "content": (text.upper() if i % 2 else text) + " " * i}]} for i in range(21)]
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
cat > lgrade.py <<'PY'
def g(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if "l" in t else 0.0 for t in texts]
PY
echo '[{"name": "lgrade.g"}]' > graders-dup.json
held=1
for g in goldens-dup.jsonl goldens-near.jsonl; do
  echo "$g: distinct lines $(sort -u $g | wc -l) of $(wc -l < $g)"
  timeout 900 $CLI evaluate-model "$WS/models/tiny" --goldens $g --graders @graders-dup.json --run "$R" > base-$g.log 2>&1
  rc=$?; echo "  evaluate-model rc=$rc: $(grep -m1 -o 'holds [0-9]* distinct goldens in [0-9]* rows: row [0-9]* repeats row [0-9]*' base-$g.log)"
  grep -q "distinct goldens in 21 rows" base-$g.log || held=0
  timeout 900 $CLI promote-checkpoint "$R" --goldens $g > promote-$g.log 2>&1
  rc=$?; echo "  promote-checkpoint rc=$rc: $(grep -m1 -o 'holds [0-9]* distinct goldens in [0-9]* rows: row [0-9]* repeats row [0-9]*' promote-$g.log)"
  grep -q "^PROMOTE" promote-$g.log && { grep -m1 "^PROMOTE" promote-$g.log | cut -c1-300; held=0; }
  grep -q "distinct goldens in 21 rows" promote-$g.log || held=0
done
[ $held = 1 ] && echo HELD || echo BROKEN

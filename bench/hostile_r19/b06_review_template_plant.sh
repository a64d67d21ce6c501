#!/bin/bash
# Round 19 (copied from the round; REPO, PY override).
# r19 b06 (gate: what was reviewed is not what trains; b05's gap on sample-completions): sampling renders the
# prompts with inspection/pinned_load.pinned_tokenizer, which writes the verified tokenizer files into
# mkdtemp("llm-finetuning-pinned-") in $TMPDIR and loads AutoTokenizer.from_pretrained(that folder) by path, with no
# look at the folder and no check of the tokenizer as loaded. A racer plants additional_chat_templates/default.jinja
# there (transformers prefers it over chat_template.jinja): every reviewed completion answers a prompt the trainer
# never renders (here: the question dropped). The review, the verdict and the gate accept them, and the run trains
# with the real template. The base is the SFT warm start, which answers in <reasoning> tags under the real template.
# Sampled twice at the same seed, plainly and with the racer: the reviewed completions are not the model's own
# for the training prompts, and the gate is open.
# Exit 1 while the break exists, 0 once fixed (the planted sampling refused). usage: b06_review_template_plant.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/hostile_r19_b06ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
export PRE="rm -rf $WS/models/tiny && cp -r $REPO/mcp_server/tiny_warm_start $WS/models/tiny"
R=$(NOREVIEW=1 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
timeout 600 $CLI sample-completions "$R" --num-prompts 13 > sample-plain.log 2>&1; echo "plain sampling rc=$?"
cp "$R/inspection/samples.jsonl" "$WS/samples-plain.jsonl"
mkdir -p "$WS/tmp"; rm -f "$WS.racer.log"
"$PY" "$HERE/plant_pinned.py" "$WS/tmp" "$WS.racer.log" & RACER=$!
sleep 1
TMPDIR="$WS/tmp" timeout 600 $CLI sample-completions "$R" --num-prompts 13 > sample.log 2>&1; echo "sampling with the plant rc=$? $(grep -m1 -iE 'error|refus|changed' sample.log | cut -c1-200)"
kill $RACER 2>/dev/null; echo "racer: $(tr '\n' ' ' < "$WS.racer.log" | cut -c1-300)"
timeout 600 $CLI inspect-rewards "$R" > inspect.log 2>&1; echo "inspect rc=$?"
timeout 600 $CLI record-inspection-verdict "$R" --verdict pass --reviewer me --agree-rest > verdict.log 2>&1; echo "verdict rc=$? $(head -1 verdict.log | cut -c1-160)"
timeout 600 $CLI check-inspection-gate "$R" > gate.log 2>&1; gate=$?; echo "gate rc=$gate $(head -1 gate.log | cut -c1-160)"
"$PY" - "$WS/samples-plain.jsonl" "$R/inspection/samples.jsonl" > compare.txt <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
texts = lambda rows: [str(r.get("completion")) for r in rows]
same = sum(x == y for x, y in zip(texts(a), texts(b)))
print(f"{same} of {len(b)} reviewed completions are the model's own for the training prompts (same seed); "
      f"'reasoning' in {sum('reasoning' in t for t in texts(b))} reviewed vs {sum('reasoning' in t for t in texts(a))} plain")
print("DIFFER" if b and same < len(b) // 2 else "SAME")
PY
cat compare.txt
st=none
if [ $gate = 0 ]; then
  timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
  for i in $(seq 1 120); do
    st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
    case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
  echo "training on the review of the planted template's completions: $st"
fi
[ $gate = 0 ] && grep -q DIFFER compare.txt && [ "$st" = succeeded ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

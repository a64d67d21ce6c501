#!/bin/bash
# Round 18, b06 (copied from the round; REPO, PY override). Held since: the load checks what is in memory against
# the pin recorded (inspection/pinned_load.py: the trainer's loaded_weights check), refusing a swap.
# r18 b06 (gate: what was reviewed is not what trains): sample-completions hashes the model folder (the trainer
# loader's fingerprint) BEFORE it loads the model by path, and never checks that what loaded is what it hashed (the
# trainer and promote do). A racer renames another model over the folder between the two and puts the pinned one
# back after the load: samples.jsonl holds another model's completions (here the SFT warm start's, where the run
# trains the untrained tiny model), the review and the verdict are recorded over them and the gate opens.
# The reproducer samples twice at the same seed, once plainly and once with the racer: the pinned model's own
# samples and the reviewed ones differ, and the gate is open.
# Exit 1 while the break exists, 0 once fixed (the second sampling refused, or its samples the pinned model's).
# usage: b06_sampling_swap.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/r18load/b06ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(NOREVIEW=1 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
timeout 600 $CLI sample-completions "$R" --num-prompts 13 > sample-plain.log 2>&1; echo "plain sampling rc=$?"
cp "$R/inspection/samples.jsonl" "$WS/samples-plain.jsonl"
cp -r "$REPO/mcp_server/tiny_warm_start" "$WS/models/other"
rm -f "$WS.racer.log"; "$PY" "$HERE/swap_racer.py" "$WS/models/tiny" "$WS/models/other" "$WS.racer.log" 0.05 & RACER=$!
sleep 1
timeout 600 $CLI sample-completions "$R" --num-prompts 13 > sample.log 2>&1; echo "sampling with the racer rc=$?"
sleep 4; kill $RACER 2>/dev/null; echo "racer: $(tr '\n' ' ' < "$WS.racer.log")"
timeout 600 $CLI inspect-rewards "$R" > inspect.log 2>&1; echo "inspect rc=$?"
timeout 600 $CLI record-inspection-verdict "$R" --verdict pass --reviewer me --agree-rest > verdict.log 2>&1; echo "verdict rc=$?"
timeout 600 $CLI check-inspection-gate "$R" > gate.log 2>&1; gate=$?; echo "gate rc=$gate $(head -1 gate.log | cut -c1-160)"
"$PY" - "$WS/samples-plain.jsonl" "$R/inspection/samples.jsonl" > compare.txt <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
texts = lambda rows: [str(r.get("completion")) for r in rows]
same = sum(x == y for x, y in zip(texts(a), texts(b)))
print(f"{same} of {len(b)} reviewed completions are the pinned model's own (same seed); "
      f"'reasoning' in {sum('reasoning' in t for t in texts(b))} reviewed vs {sum('reasoning' in t for t in texts(a))} plain")
print("DIFFER" if b and same < len(b) // 2 else "SAME")
PY
cat compare.txt
[ $gate = 0 ] && grep -q DIFFER compare.txt && { echo BROKEN; exit 1; }
echo HELD; exit 0

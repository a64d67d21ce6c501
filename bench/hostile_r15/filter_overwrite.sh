#!/bin/bash
# usage: filter_overwrite.sh WS  -- a person's project folder proj/ holds their own data/filtered.jsonl (81 rows) and
# data/difficulty-filter.json (their notes). emit-config --run-dir proj, then inspect-rewards --difficulty-filter.
# Case A: the dataset is elsewhere (their files are not inputs). Case B: their data/filtered.jsonl IS the dataset.
# Expected: nothing of the person's is overwritten (refused, or written elsewhere).
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=$REPO/.venv/bin/python
WS=$1; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"
rm -rf $WS; mkdir -p $WS/models; cp -r "$($PY -c "from mcp_server.tiny import ensure_tiny_model; print(ensure_tiny_model())")" $WS/models/tiny
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS
$PY - $WS/data.jsonl <<'PY'
import json, sys
rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": str(a + b)} for a in range(9) for b in range(9)]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
cat > rew.py <<'PY'
def halfs(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if len(t) % 2 == 0 else 0.0 for t in texts]
PY
for CASE in A B; do
  rm -rf proj; mkdir -p proj/data; cp data.jsonl proj/data/filtered.jsonl; echo '{"mine": "my notes, not a tool record"}' > proj/data/difficulty-filter.json
  sha_before=$(sha256sum proj/data/filtered.jsonl proj/data/difficulty-filter.json | cut -c1-16 | tr '\n' ' ')
  DS=$WS/data.jsonl; [ $CASE = B ] && DS=$WS/proj/data/filtered.jsonl
  $CLI emit-config --model $WS/models/tiny --dataset $DS --gpu cpu --rewards '[{"name":"rew.halfs"}]' --run-dir proj \
    --override max_steps=2 --override per_device_train_batch_size=4 --override num_generations=4 --override max_completion_length=12 > emit.log 2>&1 || { echo "case $CASE emit refused: $(tail -2 emit.log)"; continue; }
  $CLI sample-completions proj --num-prompts 13 > sample.log 2>&1 || { echo "sample failed: $(tail -2 sample.log)"; continue; }
  $CLI inspect-rewards proj --difficulty-filter '{}' > insp.log 2>&1; rc=$?
  sha_after=$(sha256sum proj/data/filtered.jsonl proj/data/difficulty-filter.json | cut -c1-16 | tr '\n' ' ')
  echo "case $CASE: inspect rc=$rc; $(grep -i "difficulty filter" insp.log | head -1 | cut -c1-160)"
  echo "   person's files before: $sha_before after: $sha_after; filtered.jsonl rows now $(wc -l < proj/data/filtered.jsonl), notes: $(head -c 80 proj/data/difficulty-filter.json)"
  ls proj/archive 2>/dev/null | sed 's/^/   archive: /'
done

#!/bin/bash
# usage: setup.sh WS [extra emit args...] -> gated workspace (tiny model copy, data.jsonl, rew.nonempty), run emitted,
# sampled (13 prompts), inspected, verdict recorded. Prints the run dir on the last line.
set -e
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO
CLI="$PY -m mcp_server.cli"
WS=$1; shift
rm -rf "$WS"; mkdir -p "$WS/models"
cp -r "$($PY -c "from mcp_server.tiny import ensure_tiny_model; print(ensure_tiny_model())")" "$WS/models/tiny"
$PY - "$WS/data.jsonl" <<'PY'
import json, sys
rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": str(a + b)}
        for a in range(9) for b in range(9)]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
[ -f "$WS/rew.py" ] || cat > "$WS/rew.py" <<'PY'
def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if t.strip() else 0.0 for t in texts]
PY
[ -n "$REW_PY" ] && printf '%s\n' "$REW_PY" > "$WS/rew.py"
[ -n "$PRE" ] && eval "$PRE"
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"
$CLI emit-config --model "$WS/models/tiny" --dataset "${DATASET:-$WS/data.jsonl}" --gpu cpu \
  --rewards '[{"name":"rew.nonempty","params":{},"weight":1.0}]' --run-name r \
  --override max_steps=${STEPS:-4} --override per_device_train_batch_size=4 --override num_generations=4 \
  --override max_completion_length=12 --override logging_steps=1 --override save_steps=1 \
  --override gradient_accumulation_steps=1 "$@" > emit.log 2>&1 || { cat emit.log; exit 1; }
R=$(ls -d $WS/runs/*-r)
[ -n "$NOREVIEW" ] && { echo $R; exit 0; }
$CLI sample-completions $R --num-prompts 13 > sample.log 2>&1 || { cat sample.log; exit 1; }
$CLI inspect-rewards $R > inspect.log 2>&1 || { cat inspect.log; exit 1; }
$CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest > verdict.log 2>&1 || { cat verdict.log; exit 1; }
$CLI check-inspection-gate $R > gate.log 2>&1 || { cat gate.log; exit 1; }
echo $R

#!/bin/bash
# usage: promote_subprocess.sh WS [between|during|honest]  -- round 15 F1, the subprocess variant, self-contained.
# A run is emitted on the tiny model and the tiny model itself is placed as its checkpoint (never launched: judged as
# placed), so the checkpoint IS the base model and any PROMOTE is forged. The grader grade.g reads its pass value
# through a child process (/bin/cat gk.txt), which the graders' read tracking cannot see.
#   between: the base model's baseline is measured with gk.txt = 0.0 (every golden fails); gk.txt is then set to 1.0
#            and promote-checkpoint judges the checkpoint. Expected: refused by the grader replay (the baseline's
#            stored completions, graded again now, score 1.0 where 0.0 was stored).
#   during:  gk.txt is set to 1.0 while the checkpoint decodes (a watcher on promote.log's stage line) and put back
#            to 0.0 when the drift stage starts. Expected: refused by the re-grade after the checkpoint's grading.
#   honest:  gk.txt never changes. Expected: REJECT (no gain), as without the replay; prints the replay's seconds.
# Prints the baseline line, promote's exit code and verdict or refusal, and the seconds promote took.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
WS=$1; MODE=${2:-between}; CLI="timeout 900 $REPO/.venv/bin/llm-finetuning"; PY=$REPO/.venv/bin/python
[ -n "$WS" ] || { echo "usage: $0 WS [between|during|honest]"; exit 2; }
rm -rf "$WS"; mkdir -p "$WS/models"; cd "$WS"; export LLM_FINETUNING_WORKSPACE=$WS
cp -r "$($PY -c "from mcp_server.tiny import ensure_tiny_model; print(ensure_tiny_model())")" models/tiny
$PY - <<'PY'
import json
rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "answer": str(a + b)}
        for a in range(5) for b in range(4)]
open("data.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
echo 0.0 > gk.txt
cat > grade.py <<PY
import subprocess
def g(completions, **kwargs):
    v = float(subprocess.check_output(["/bin/cat", "$WS/gk.txt"]))
    return [v for c in completions]
PY
$CLI emit-config --model "$WS/models/tiny" --dataset "$WS/data.jsonl" --gpu cpu --rewards '[{"name":"grade.g"}]' \
  --run-name r --override max_steps=4 --override per_device_train_batch_size=4 --override num_generations=4 \
  --override max_completion_length=12 > emit.log 2>&1 || { cat emit.log; exit 1; }
R=$(ls -d $WS/runs/*-r); cp -r models/tiny "$R/checkpoints"
$CLI evaluate-model models/tiny --goldens data.jsonl --graders '[{"name":"grade.g"}]' --run $R > base.log 2>&1
echo "baseline rc=$? $(grep -i "pass rate\|baseline" base.log | head -2 | tr '\n' ' ' | cut -c1-200)"
case $MODE in
  between) echo 1.0 > gk.txt;;
  during) (for i in $(seq 3000); do grep -q "checkpoint on the goldens: starting" promote.log 2>/dev/null && break; sleep 0.05
           done; echo 1.0 > gk.txt
           for i in $(seq 6000); do grep -q "drift suite, base model: starting" promote.log 2>/dev/null && break; sleep 0.05; done
           echo 0.0 > gk.txt) & WATCH=$!;;
esac
START=$(date +%s.%N)
$CLI promote-checkpoint $R > promote.log 2>&1; RC=$?
END=$(date +%s.%N); [ -n "$WATCH" ] && kill $WATCH 2>/dev/null
echo "promote rc=$RC in $(echo "$END - $START" | bc) s: $(grep -E "^PROMOTE|^REJECT|^error" promote.log | head -1 \
  | cut -c1-400)"
grep "graders replayed" promote.log

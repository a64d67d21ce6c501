#!/bin/bash
# usage: unsampled_key.sh WS [subproc|env]  -- an honest-looking reward weighs each prompt by an answer key it reads
# through a child process (subproc: /bin/cat key.json; env: a JSON key in the R15_KEY variable). The review sees every
# weight 1.0. After the verdict only the entries of prompts the review never sampled (68 of 81) are changed to 7.0:
# the replay of the review (the 13 sampled prompts) scores the same. Expected: the gate or the trainer refuses
# (an input of the reward changed since the review). Prints gate, launch, status and the rewards logged per step.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); PY=$REPO/.venv/bin/python
WS=$1; MODE=${2:-subproc}; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"
$HERE/../hostile_r13/setup.sh $WS >/dev/null || exit 1
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
mkkey() { # $1: weight for unsampled prompts
$PY - "$1" $WS/data.jsonl $R/inspection/samples.jsonl $WS/key.json <<'PY'
import json, sys, os
w, data, samples, out = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
seen = {json.loads(l)["prompt"][-1]["content"] for l in open(samples)} if os.path.exists(samples) and w != 1.0 else set()
key = {json.loads(l)["prompt"][-1]["content"]: (1.0 if json.loads(l)["prompt"][-1]["content"] in seen else w) for l in open(data)}
json.dump(key, open(out, "w"))
print(f"key: {sum(v != 1.0 for v in key.values())} of {len(key)} prompts weighted {w}", file=sys.stderr)
PY
}
mkkey 1.0
if [ $MODE = env ]; then READ='json.loads(os.environ.get("R15_KEY", "{}"))'; export R15_KEY="$(cat key.json)"; else READ="json.loads(subprocess.check_output(['/bin/cat', '$WS/key.json']))"; fi
cat > rew.py <<PY
import json, os, subprocess
def nonempty(completions, prompts=None, **kwargs):
    key = $READ
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [(1.0 if t.strip() else 0.0) * key.get(p[-1]["content"], 1.0) for t, p in zip(texts, prompts)]
PY
$CLI sample-completions $R --num-prompts 13 >/dev/null 2>&1; $CLI inspect-rewards $R >insp.log 2>&1
$CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest > verdict.log 2>&1 || { cat verdict.log; exit 1; }
mkkey 7.0; [ $MODE = env ] && export R15_KEY="$(cat key.json)"
echo "gate: $($CLI check-inspection-gate $R 2>&1 | head -1 | cut -c1-100)"
$CLI launch-training $R > launch.log 2>&1; echo "launch rc=$? $(tail -1 launch.log | cut -c1-120)"
for i in $(seq 100); do s=$($CLI training-status $R 2>&1 | head -1); case "$s" in *running*|*launching*|*starting*) sleep 3;; *) break;; esac; done
echo "status: $s"
grep -h -o '"rewards/nonempty/mean": [0-9.]*' $R/train/logs/progress.jsonl 2>/dev/null
grep -i "refus\|replay" $R/train/logs/stdout.log 2>/dev/null | head -3 | cut -c1-300

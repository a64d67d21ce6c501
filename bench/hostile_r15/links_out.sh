#!/bin/bash
# usage: links_out.sh WS  -- WS from setup.sh (gated, not launched). Each probe puts a symbolic link to a folder outside
# the workspace (/tmp/r15-outside/<probe>) where a door writes, runs the door, then lists what landed outside.
# Expected: refused, or the link replaced; nothing written outside.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
WS=$1; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r | head -1)
O=/tmp/r15-outside; rm -rf $O; mkdir -p $O
out() { echo "   outside now: $(cd $O && find . -type f | head -8 | tr '\n' ' ')"; }
EMIT="--model $WS/models/tiny --dataset $WS/data.jsonl --gpu cpu --rewards [{\"name\":\"rew.nonempty\"}] --override max_steps=2 --override per_device_train_batch_size=4 --override num_generations=4 --override max_completion_length=12"
mkdir -p $O/runs; mv runs runs.real; ln -s $O/runs runs
echo "L1 runs/ -> outside, emit-config: $($CLI emit-config $EMIT --run-name l1 2>&1 | grep -E "^error|run:|wrote" | head -1 | cut -c1-160)"; out
rm runs; mv runs.real runs
mkdir -p $O/eval; rm -rf eval; ln -s $O/eval eval
echo "L2 eval/ -> outside, evaluate-model: $($CLI evaluate-model $WS/models/tiny --goldens $WS/data.jsonl --graders '[{"name":"rew.nonempty"}]' --limit 3 2>&1 | grep -E "^error|baseline" | head -1 | cut -c1-160)"; out
rm eval
mkdir -p $O/insp; mv $R/inspection $R/inspection.real; ln -s $O/insp $R/inspection
echo "L3 <run>/inspection -> outside, sample-completions: $($CLI sample-completions $R --num-prompts 13 2>&1 | grep -E "^error|wrote|samples" | head -1 | cut -c1-160)"; out
rm $R/inspection; mv $R/inspection.real $R/inspection
mkdir -p $O/data; rm -rf $R/data; ln -s $O/data $R/data
echo "L4 <run>/data -> outside, inspect-rewards --difficulty-filter: $($CLI inspect-rewards $R --difficulty-filter '{}' 2>&1 | grep -E "^error|difficulty" | head -1 | cut -c1-160)"; out
rm $R/data
mkdir -p $O/ins2; mv $R/inspection/reward_code $R/inspection/reward_code.real; ln -s $O/ins2 $R/inspection/reward_code
echo "L5 <run>/inspection/reward_code -> outside, record-inspection-verdict: $($CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest 2>&1 | grep -E "^error|verdict" | head -1 | cut -c1-160)"; out
rm -rf $R/inspection/reward_code; mv $R/inspection/reward_code.real $R/inspection/reward_code 2>/dev/null
mkdir -p $O/brief; ln -sf $O/brief/brief.md $R/training-brief.md; ln -sf $O/brief/env.json $R/env-report.json
echo "L6 training-brief.md/env-report.json -> dangling outside, check-environment: $($CLI check-environment --run $R 2>&1 | tail -1 | cut -c1-120)"; out
rm -f $R/training-brief.md $R/env-report.json
echo "final gate: $($CLI check-inspection-gate $R 2>&1 | head -1 | cut -c1-80)"

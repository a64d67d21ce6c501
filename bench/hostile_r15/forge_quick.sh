#!/bin/bash
# usage: forge_quick.sh WS  -- WS holds a succeeded, promoted run (so_ext.sh then promote_so.sh). Quick forgery probes:
# F-a promote-checkpoint --checkpoint pointing at the base model folder (not a save of the run);
# F-b a never-launched run (a fresh emission) given a hand-written run.json saying succeeded, and checkpoints copied in;
# F-c export-model after the promoted checkpoint's chat_template.jinja is edited (the card must not describe it as
#     the promoted checkpoint); F-d the card's run name / reviewer fields with markdown injected through the verdict.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
WS=$1; CLI="timeout 900 $REPO/.venv/bin/llm-finetuning"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r | head -1)
echo "F-a: $($CLI promote-checkpoint $R --checkpoint $WS/models/tiny 2>&1 | grep -E "PROMOTE|REJECT|error" | head -2 | cut -c1-200)"
$CLI emit-config --model $WS/models/tiny --dataset $WS/data.jsonl --gpu cpu --rewards '[{"name":"rew.nonempty"}]' --run-name fresh \
  --override max_steps=4 --override per_device_train_batch_size=4 --override num_generations=4 --override max_completion_length=12 >/dev/null 2>&1
F=$(ls -d $WS/runs/*-fresh); cp -a $R/checkpoints $F/; cp -a $R/train/logs $F/train/; cp $R/run.json $F/run.json 2>/dev/null
echo "F-b list-runs: $($CLI list-runs 2>&1 | grep fresh | cut -c1-150)"
echo "F-b status: $($CLI training-status $F 2>&1 | head -2 | tr '\n' ' ' | cut -c1-200)"
echo "F-b promote: $($CLI promote-checkpoint $F 2>&1 | grep -E "PROMOTE|REJECT|error|refus" | head -2 | cut -c1-200)"
C=$(ls -d $R/checkpoints/checkpoint-* | sort -V | tail -1)
for d in $R/checkpoints $C; do [ -f $d/chat_template.jinja ] && echo "{{ 'INJECTED ' }}{% for m in messages %}{{ m['content'] }}{% endfor %}" > $d/chat_template.jinja; done
$CLI export-model $R > export.log 2>&1; echo "F-c export rc=$? $(grep -iE "refus|changed|error|export:" export.log | head -3 | cut -c1-220)"
grep -l INJECTED $R/export/* 2>/dev/null | head -3

#!/bin/bash
# D1: emit-config --run-dir into a run (never launched) whose train/config.yaml the person edited by hand (header kept)
# and whose train/rewards.json they wrote: both replaced with no refusal and no copy kept (train/train.py, edited,
# is refused). D2: a person's folder runs/.emit-<dead pid>-notes is removed by the next emission.
WS=${1:-/tmp/r16/ws_d1}; REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=$REPO/.venv/bin/python; export PYTHONPATH=$REPO REPO
export LLM_FINETUNING_STATE_DIR=${WS}_state
CLI="timeout 300 $PY -m mcp_server.cli"
R=$(NOREVIEW=1 $REPO/bench/hostile_r16/setup.sh $WS | tail -1); cd $WS; export LLM_FINETUNING_WORKSPACE=$WS
printf '\n# MY TUNING NOTES: lr found by 3 days of sweeps, keep!\nmy_field_marker: 1\n' >> /dev/null
$PY - $R/train/config.yaml <<'PY'
import sys; p = sys.argv[1]; t = open(p).read()
t = t.replace("learning_rate:", "# PERSON: tuned over 3 days of sweeps, do not lose\nlearning_rate:")
open(p, "w").write(t)
PY
sha_before=$(sha256sum $R/train/config.yaml | cut -c1-12); grep -c PERSON $R/train/config.yaml
$CLI emit-config --model $WS/models/tiny --dataset $WS/data.jsonl --gpu cpu --rewards '[{"name":"rew.nonempty"}]' \
   --run-dir $R --override max_steps=2 --override max_completion_length=8 > emit2.log 2>&1; echo "re-emit rc=$?"; tail -2 emit2.log
echo "D1 config.yaml: before $sha_before after $(sha256sum $R/train/config.yaml | cut -c1-12); PERSON lines left: $(grep -c PERSON $R/train/config.yaml)"
ls $R $R/train; find $R -name '*.bak' -o -name 'archive' | head
# D2
mkdir -p $WS/runs/.emit-999999-notes; echo "my notes" > $WS/runs/.emit-999999-notes/notes.txt
$CLI emit-config --model $WS/models/tiny --dataset $WS/data.jsonl --gpu cpu --rewards '[{"name":"rew.nonempty"}]' --run-name other \
   --override max_steps=2 > emit3.log 2>&1; echo "emit rc=$?"
echo "D2 runs/.emit-999999-notes/notes.txt: $([ -f $WS/runs/.emit-999999-notes/notes.txt ] && echo kept || echo DELETED)"

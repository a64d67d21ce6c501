#!/bin/bash
# usage: kill9.sh WS  -- WS from setup.sh. SIGKILL a door at several delays, then list what it left: emit-config
# (a run folder without train/config.yaml, a staging folder), record-inspection-verdict (verdict.json unparsable,
# reward_code staging left, gate state), sample-completions (then sampling again must work).
# Expected: each killed door leaves either nothing or a whole file; the next command works.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=$REPO/.venv/bin/python
WS=$1; CLIB=$REPO/.venv/bin/llm-finetuning; CLI="timeout 600 $CLIB"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r | head -1)
killat() { # $1 delay, rest: command
  local d=$1; shift; setsid "$@" > /dev/null 2>&1 & local p=$!; sleep $d; kill -9 -- -$p 2>/dev/null; wait $p 2>/dev/null; }
for d in 0.5 1 1.5 2 3 4 6; do
  killat $d $CLIB emit-config --model $WS/models/tiny --dataset $WS/data.jsonl --gpu cpu --rewards '[{"name":"rew.nonempty"}]' --run-name k$d
done
echo "emit killed at 0.5..6 s: runs/ now: $(ls -A runs | tr '\n' ' ')"
for r in runs/*; do [ -f $r/train/config.yaml ] || echo "   HALF: $r has no train/config.yaml: $(ls -A $r | tr '\n' ' ')"; done
echo "   list-runs: $($CLI list-runs 2>&1 | wc -l) lines; errors: $($CLI list-runs 2>&1 | grep -ci unreadable)"
for d in 0.3 0.6 0.9 1.2 1.6 2.2; do
  killat $d $CLIB record-inspection-verdict $R --verdict pass --reviewer "killed-$d" --agree-rest
  $PY -c "import json,sys; json.load(open('$R/inspection/verdict.json'))" 2>/dev/null || echo "   verdict.json unparsable after kill at $d"
done
echo "verdict killed: inspection/ now: $(ls -A $R/inspection | tr '\n' ' ')"
echo "   gate: $($CLI check-inspection-gate $R 2>&1 | head -1 | cut -c1-120)"
for d in 2 4 6; do killat $d $CLIB sample-completions $R --num-prompts 13; done
echo "sampling killed: inspection/ now: $(ls -A $R/inspection | tr '\n' ' ')"
echo "   sample again: $($CLI sample-completions $R --num-prompts 13 2>&1 | tail -1 | cut -c1-120)"

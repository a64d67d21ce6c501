#!/bin/bash
# b05 (round 17): after a genuine guard stop (entropy_collapse at learning rate 1.0; the findings' patches name
# learning_rate and beta), `resume-training --patch` also took temperature 1.9 and top_k 3, moved the verdict's
# sampling pin for them and trained on settings nobody reviewed. The contract: after a guard stop a patch changes a
# field the verdict pins only to a value the stop's findings (train/logs/guard.json) propose.
# usage: b05_guard_patch.sh [WS] (builds, through ../hostile_r16/setup.sh, a workspace whose run the guard stops,
# unless WS already holds one). Prints HELD when the resume is refused naming temperature and top_k with nothing
# written (config and verdict as they were), BROKEN when the resumed run trains on them.
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export REPO PYTHONPATH=$REPO
WS=${1:-/tmp/r17b05/ws}
CLI="$PY -m mcp_server.cli"
if [ ! -d "$WS/runs" ]; then   # a run the guard stops: lr 1.0 collapses entropy within 8 steps (guard: stop)
  R=$(STEPS=8 timeout 1200 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" --guard stop --override learning_rate=1.0 \
      --override beta=0.04 --override-reason "rehearsal of a guard stop" | tail -1) || { echo "setup failed"; exit 2; }
  (cd "$WS" && LLM_FINETUNING_WORKSPACE="$WS" timeout 600 $CLI launch-training "$R" > launch.log 2>&1)
  for i in $(seq 1 120); do
    st=$(cd "$WS" && LLM_FINETUNING_WORKSPACE="$WS" timeout 60 $CLI training-status "$R" --json 2>/dev/null \
         | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
    case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
  echo "first launch: $st"
fi
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; R=$(ls -d "$WS"/runs/*-r)
$PY -c "import json; d=json.load(open('$R/train/logs/guard.json')); print('guard:', d.get('stopped'), \
[(f['code'], f.get('patch')) for f in d.get('findings', [])])"
LR=$($PY -c "import json; d=json.load(open('$R/train/logs/guard.json')); print(next((f['patch']['learning_rate'] \
for f in d.get('findings', []) if 'learning_rate' in (f.get('patch') or {})), 1e-06))")
PATCH="{\"learning_rate\": $LR, \"temperature\": 1.9, \"top_k\": 3}"
before=$(cat "$R/train/config.yaml" "$R/inspection/verdict.json" | sha256sum)
timeout 900 $CLI resume-training "$R" --patch "$PATCH" > resume.log 2>&1; rc=$?
echo "resume with $PATCH: rc=$rc"; grep -v "^  \.\.\." resume.log | head -4 | cut -c1-400
after=$(cat "$R/train/config.yaml" "$R/inspection/verdict.json" | sha256sum)
if [ $rc -eq 0 ]; then
  for i in $(seq 1 100); do
    st=$(timeout 60 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
    case "$st" in succeeded|failed) break;; esac; sleep 5; done
  echo "state=$st"; grep -n "temperature\|top_k" "$R/train/config.yaml" | head; echo BROKEN
elif grep -q "temperature: 1.9 is not proposed" resume.log && grep -q "top_k: 3 is not proposed" resume.log \
     && [ "$before" = "$after" ]; then
  echo HELD
else
  echo "BROKEN (refused, but not naming temperature and top_k, or something was written)"
fi

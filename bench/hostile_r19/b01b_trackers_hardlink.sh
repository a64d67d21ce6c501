#!/bin/bash
# r19 b01b (b01 variant, same gap): <run>/trackers/mlflow.db as a HARD link to a file outside the workspace (a person's
# own, here an empty file): link_refusals/shared_logs look for hard links only under train/logs, cache/ and the output_dir,
# so the trainer's MLflow store writes into the outside file. Exit 1 while the break exists, 0 once fixed. usage: b01b_... [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
export LLM_FINETUNING_PYTHON=${LLM_FINETUNING_PYTHON:-$REPO/.venv-trackers/bin/python}
WS=${1:-/tmp/hostile_r19_b01bws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" --override report_to=mlflow | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
rm -f $WS.person-mlflow.db; : > $WS.person-mlflow.db
mkdir -p "$R/trackers"; ln $WS.person-mlflow.db "$R/trackers/mlflow.db"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$? $(grep -m1 -E '^(started|refused)' launch.log | cut -c1-200)"
for i in $(seq 1 120); do st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null); case "$st" in succeeded|failed|stopped|not_launched) break;; esac; sleep 5; done
echo "state=$st; the person's file outside: $(stat -c %s $WS.person-mlflow.db) bytes"
[ "$(stat -c %s $WS.person-mlflow.db)" != 0 ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

#!/bin/bash
# r19 b01 (data loss: written outside the workspace): <run>/trackers/ is where report_to's trackers write
# (training/trainer/tracker_dirs.py: MLFLOW_TRACKING_URI=sqlite:///<run>/trackers/mlflow.db resolved, WANDB_DIR,
# TRACKIO_DIR), but launch_gates.link_refusals does not refuse a symbolic link there (LINKS_REFUSED = train, logs,
# cache, plus the output_dir tree). A link planted at <run>/trackers -> a folder outside the workspace: the launch
# passes every gate and the trainer creates its mlflow.db (SQLite, written for every logged step) outside.
# Needs the trackers venv (.venv-trackers: make trackers) as the training interpreter, report_to: mlflow.
# Exit 1 while the break exists (a file appeared outside the workspace), 0 once fixed (refused, nothing outside).
# usage: b01_trackers_link_out.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
export LLM_FINETUNING_PYTHON=${LLM_FINETUNING_PYTHON:-$REPO/.venv-trackers/bin/python}
WS=${1:-/tmp/hostile_r19_b01ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" --override report_to=mlflow | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
OUT=$WS.outside; rm -rf "$OUT"; mkdir -p "$OUT"
ln -s "$OUT" "$R/trackers"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$? $(head -1 launch.log | cut -c1-200)"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped|not_launched) break;; esac; sleep 5; done
echo "state=$st"; echo "outside the workspace now: $(cd "$OUT" && find . -type f | head -5 | tr '\n' ' ')"
[ -n "$(find "$OUT" -type f | head -1)" ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

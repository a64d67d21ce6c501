#!/bin/bash
# r19 b04 (data loss: an earlier export moved out of the workspace; b02's gap on export's door): export-model
# --archive-previous checks <run>/archive once (workspace.archive_problem) before it loads the checkpoint, then loads,
# decodes the smoke goldens, saves, reloads and decodes again, and only then renames export/ to archive/export-<n>
# (Run.archive_slot) with no second look. archive/ planted as a symbolic link to a folder outside the workspace once
# the export is loading: the earlier export (the person's shipped model and card) is moved outside.
# Exit 1 while the break exists, 0 once fixed. usage: b04_export_archive_link.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/hostile_r19_b04ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
state() { timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null; }
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
for i in $(seq 1 120); do st=$(state); case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done; echo "training: $st"
timeout 600 $CLI export-model "$R" --allow-unpromoted > export1.log 2>&1; echo "first export rc=$?"
OUT=$WS.outside; rm -rf "$OUT"; mkdir -p "$OUT"
timeout 600 $CLI export-model "$R" --allow-unpromoted --archive-previous > export2.log 2>&1 & E=$!
for i in $(seq 1 600); do grep -q "loading" export2.log 2>/dev/null && break; sleep 0.1; done
ln -s "$OUT" "$R/archive"; echo "planted archive -> $OUT"
wait $E; echo "second export rc=$? $(grep -m1 -iE 'exported|refus|error' export2.log | cut -c1-200)"
echo "outside the workspace now: $(cd "$OUT" && find . -maxdepth 2 | head -6 | tr '\n' ' ')"
[ -n "$(find "$OUT" -type f | head -1)" ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

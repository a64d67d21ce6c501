#!/bin/bash
# r20 b02 (what is exported is not what export wrote): export_model's last check of its staging folder,
# refuse_staged_changes (round 18's fix), lists "files not written by the export" with rglob + Path.is_file(), which
# is False for a symbolic link to a folder, a dangling link and a pipe. A racer that plants, in <run>/.export-*/
# while the export stages, a link to a folder outside the workspace (extra_weights -> $OUT), a dangling link named as
# a weights shard and a FIFO: export succeeds (rc 0), lists them among the exported files, and export/ carries a link
# out of the workspace (an upload of export/ follows it).
# Exit 1 while the break exists, 0 once export refuses them. usage: b02_export_staged_links.sh [WS]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/hostile_r20_b02ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=1 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
for i in $(seq 1 150); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 4; done
echo "training: $st"; [ "$st" = succeeded ] || exit 2
OUT=${WS}.outside; rm -rf "$OUT"; mkdir -p "$OUT"; echo private > "$OUT/secret"
$PY "$HERE/export_plant.py" "$R" "$OUT" > plant.log 2>&1 & P=$!
timeout 600 $CLI export-model "$R" --allow-unpromoted > export.log 2>&1; rc=$?; wait $P
echo "export rc=$rc; $(cat plant.log)"; grep -m1 "files:" export.log
odd=$(find "$R/export" -mindepth 1 ! -type f ! -type d 2>/dev/null | head -5 | tr '\n' ' ')
if [ $rc = 0 ] && [ -n "$odd" ]; then echo "BROKEN: export/ holds entries the export never wrote: $odd"; ls -la "$R/export"; exit 1; fi
echo HELD; exit 0

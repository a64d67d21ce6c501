#!/bin/bash
# r19 b02 (data loss: a run's evidence moved out of the workspace): launch-training --archive-previous checks
# <run>/archive once (workspace.archive_problem, "before any gate": round 7's link to /elsewhere), then runs the
# gates (the logs and verdict gates, the one-step rehearsal, the environment probe: tens of seconds), then
# _archive_attempt renames run.json, train/logs, checkpoints/, promotion.json, promotion-report.md, export/ into
# archive/attempt-<n>/ with no second look. An archive/ planted as a symbolic link to a folder outside the workspace
# once the gates are under way: the earlier attempt's record, logs, checkpoints and promotion leave the workspace
# (and the relaunch goes on). Exit 1 while the break exists (the earlier attempt's files are outside), 0 once fixed.
# usage: b02_archive_link_after_check.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/hostile_r19_b02ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
state() { timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null; }
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
for i in $(seq 1 120); do st=$(state); case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done; echo "first attempt: $st"
OUT=$WS.outside; rm -rf "$OUT"; mkdir -p "$OUT"
timeout 600 $CLI launch-training "$R" --archive-previous > relaunch.log 2>&1 & L=$!
for i in $(seq 1 240); do grep -q "config: validating" relaunch.log 2>/dev/null && break; sleep 0.25; done
ln -s "$OUT" "$R/archive"; echo "planted archive -> $OUT"
wait $L; echo "relaunch rc=$? $(grep -m1 -E '^(started|refused)' relaunch.log | cut -c1-200)"
for i in $(seq 1 120); do st=$(state); case "$st" in succeeded|failed|stopped|not_launched) break;; esac; sleep 5; done
echo "outside the workspace now: $(cd "$OUT" && find . -maxdepth 3 | head -8 | tr '\n' ' ')"
[ -n "$(find "$OUT" -type f | head -1)" ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

#!/bin/bash
# Round 14 F1: list_runs reads a run through a link leading out of the workspace (another workspace's succeeded run)
# and lists it as this workspace's, "succeeded, step 4/4"; every other door refuses that same link ("nothing is
# read or written through it"). usage: list_runs_link.sh WS OTHER_RUN_DIR
REPO=$(cd "$(dirname "$0")/../.." && pwd); WS=$1; OTHER=$2
ln -sfn "$OTHER" "$WS/runs/evil"
PYTHONPATH=$REPO $REPO/.venv/bin/python $REPO/bench/hostile_r14/mcpc.py "$WS" 'list_runs {}' 'training_status {"run":"evil"}' 2>/dev/null | head -30
rm "$WS/runs/evil"

#!/bin/bash
# Round 20 (copied from the round; REPO, PY override).
# r20 b04 (a file outside the workspace overwritten by the trainer): round 17 b06's link in a future checkpoint is
# refused by the launch/resume gate (written.py's link check of output_dir's entries), and the trainer checks before
# each save that the checkpoint FOLDER resolves inside the run (digest.refuse_save_outside), never the files in it.
# Planted after the gate, while the trainer runs: checkpoints/checkpoint-<k>/ made as a real folder holding
# trainer_state.json, config.json and optimizer.pt as links to files outside the workspace. transformers'
# _save_checkpoint writes into that folder with open(), through the links: the outside files are overwritten.
# Exit 1 while the break exists (an outside file overwritten), 0 once the trainer refuses the save untouched.
# usage: b04_checkpoint_file_link_midrun.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/hostile_r20_b04ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=6 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
OUT=${WS}.outside; rm -rf "$OUT"; mkdir -p "$OUT"
for f in bashrc config optim; do echo "the person's own $f" > "$OUT/$f"; done
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$? $(grep -m1 -E '^(started|refused)' launch.log | cut -c1-80)"
for i in $(seq 1 1200); do [ -d "$R/checkpoints/checkpoint-1" ] && break; sleep 0.2; done
for k in 4 5 6; do
  mkdir -p "$R/checkpoints/checkpoint-$k"
  ln -sf "$OUT/bashrc" "$R/checkpoints/checkpoint-$k/trainer_state.json"
  ln -sf "$OUT/config" "$R/checkpoints/checkpoint-$k/config.json"
  ln -sf "$OUT/optim" "$R/checkpoints/checkpoint-$k/optimizer.pt"
done; echo "planted links in checkpoint-4..6 after checkpoint-1 was saved"
for i in $(seq 1 150); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 4; done
echo "run: $st"; tail -2 "$R/train/logs/stdout.log" | cut -c1-250
changed=""
for f in bashrc config optim; do grep -q "the person's own $f" "$OUT/$f" || changed="$changed $f"; done
[ -n "$changed" ] && { echo "BROKEN: outside files overwritten:$changed ($(head -c 80 "$OUT/bashrc" | tr '\n' ' '))"; exit 1; }
echo HELD; exit 0

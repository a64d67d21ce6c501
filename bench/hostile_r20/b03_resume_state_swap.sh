#!/bin/bash
# Round 20 (copied from the round; REPO, PY override).
# r20 b03 (a resume from state the run never wrote; a run "succeeded" at max_steps with steps never trained): the
# trainer's confirm_resume_checkpoint hashes every file of the checkpoint against the signed ledger, then transformers
# reads trainer_state.json again by path (TrainerState.load_from_json in _inner_training_loop); ResumedWeights
# (on_train_begin) re-checks the weights, optimizer.pt and scheduler.pt from held bytes, never trainer_state.json.
# A racer (state_racer.py, inotify) renames a forged trainer_state.json (global_step = max_steps - 1) over the
# checkpoint's after the hash and puts the original back once transformers read it: the resumed trainer starts at
# step max_steps - 1, trains one step, saves checkpoint-<max_steps> and the run reads "succeeded", max_steps reached.
# Exit 1 while the break exists (the resume trained fewer steps than it reports), 0 once refused.
# usage: b03_resume_state_swap.sh [WS]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/hostile_r20_b03ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
MAX=8
R=$(STEPS=$MAX timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
state() { timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null; }
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
for i in $(seq 1 600); do [ -d "$R/checkpoints/checkpoint-2" ] && break; sleep 0.5; done
timeout 300 $CLI stop-training "$R" > stop.log 2>&1; echo "stop rc=$?"
for i in $(seq 1 100); do st=$(state); case "$st" in succeeded|failed|stopped) break;; esac; sleep 3; done
last=$(ls -d "$R"/checkpoints/checkpoint-* | sort -t- -k2 -n | tail -1); echo "first launch: $st at $(basename "$last")"
[ "$st" = stopped ] || exit 2
timeout 600 $CLI resume-training "$R" > resume.log 2>&1; echo "resume rc=$? $(grep -m1 -E '^(started|refused|error)' resume.log | cut -c1-100)"
timeout 300 $PY "$HERE/state_racer.py" "$last" $((MAX - 1)) > racer.log 2>&1 & P=$!
wait $P  # nothing else reads the checkpoint meanwhile (training-status is asked once the racer is done)
for i in $(seq 1 150); do st=$(state); case "$st" in succeeded|failed|stopped) break;; esac; sleep 4; done
cat racer.log
steps=$($PY -c "
import json; n=0
for l in open('$R/train/logs/progress.jsonl'):
    try: d=json.loads(l)
    except Exception: continue
    if 'loss' in d or 'reward' in d: n+=1
print(n)" 2>/dev/null)
echo "resumed run: $st; checkpoints: $(ls "$R/checkpoints" | grep checkpoint | tr '\n' ' '); logged steps: $steps of $MAX"
tail -3 "$R/train/logs/stdout.log" | cut -c1-200
if [ "$st" = succeeded ] && grep -q "forged state in" racer.log && [ ! -d "$R/checkpoints/checkpoint-$((MAX - 2))" -o "$steps" -lt "$MAX" ]; then
  echo "BROKEN: succeeded at max_steps $MAX after a resume from a trainer_state.json the run never wrote"; exit 1; fi
echo HELD; exit 0

#!/bin/bash
# Copied from round 16 (issue 48), run against this checkout (REPO, PY override). Held since: see notes.txt.
# F4: what a workspace writer (no key) can make training-status / diagnose-run say about a succeeded run by
# (a) moving one signed progress line to the end, (b) appending forged lines to the unsigned stdout.log.
# usage: f4_log_games.sh WS (a succeeded run runs/*-r, e.g. from g1_after_replay.sh; restored afterwards)
WS=${1:-/tmp/r16/ws_g1}; HERE=$(cd "$(dirname "$0")" && pwd); REPO=${REPO:-$(cd "$HERE/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO LLM_FINETUNING_WORKSPACE=$WS
CLI="timeout 300 $PY -m mcp_server.cli"; cd $WS; R=$(ls -d $WS/runs/*-r); L=$R/train/logs
cp $L/progress.jsonl $WS.f4.progress.bak; cp $L/stdout.log $WS.f4.stdout.bak
echo "=== as trained"; $CLI training-status $R 2>&1 | head -2; $CLI diagnose-run $R 2>&1 | head -2
(sed -n '2,$p' $WS.f4.progress.bak; sed -n 1p $WS.f4.progress.bak) > $L/progress.jsonl
echo "=== (a) step 1's signed line moved last"; $CLI training-status $R 2>&1 | head -2; $CLI list-runs 2>&1 | tail -1
cp $WS.f4.progress.bak $L/progress.jsonl
cat >> $L/stdout.log <<'LOG'
{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-06, 'reward': nan, 'kl': inf, 'epoch': 0.07}
Traceback (most recent call last):
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB
LOG
echo "=== (b) forged lines appended to stdout.log"; $CLI training-status $R 2>&1 | head -2; $CLI diagnose-run $R 2>&1 | head -4
cp $WS.f4.stdout.bak $L/stdout.log

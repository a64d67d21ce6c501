#!/bin/bash
# D5: two emit-config --run-dir into the same (never launched) run at once: A valid (max_steps=7), B NOT VALID (an
# unknown field, so it puts the folder back "as it was"). Does A's reported emission survive B's undo?
# usage: d5_concurrent_emit.sh WS [TRIES]
WS=${1:-/tmp/r16/ws_d5}; N=${2:-6}; REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=$REPO/.venv/bin/python; export PYTHONPATH=$REPO LLM_FINETUNING_STATE_DIR=${WS}_state
rm -rf $WS; mkdir -p $WS; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS
E="timeout 120 $PY -m mcp_server.cli emit-config --model tiny --dataset tiny --gpu cpu"
$E --run-name r --override max_steps=3 > e0.log 2>&1; R=$(ls -d $WS/runs/*-r)
for i in $(seq $N); do
  $E --run-dir $R --override max_steps=3 >/dev/null 2>&1
  d=$(echo "scale=2; $i * 0.3" | bc)
  ( $E --run-dir $R --override max_steps=7 > a.log 2>&1; echo "A rc=$?" > a.rc ) &
  ( sleep $d; $E --run-dir $R --override bogus_field=1 > b.log 2>&1; echo "B rc=$?" > b.rc ) &
  wait
  ms=$(grep -E '^max_steps:' $R/train/config.yaml | tr -d ' '); rq=$(grep -o '"max_steps": *[0-9]*' $R/train/request.json | head -1)
  echo "try $i (B after ${d}s): $(cat a.rc) $(tail -1 a.log | cut -c1-40) | $(cat b.rc) | config.yaml $ms | request.json $rq | files: $(ls $R/train | tr '\n' ' ')"
done

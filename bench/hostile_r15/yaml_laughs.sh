#!/bin/bash
# usage: yaml_laughs.sh WS LEVELS  -- a YAML alias bomb (LEVELS levels of 10 aliases: 10^LEVELS leaves once expanded)
# under one extra key of a copy of the run's config.yaml, then validate-config --no-rehearse and check-inspection-gate
# on a run holding it (timeout 300 each, this shell's memory capped at 6 GiB). Expected: refused quickly, naming it.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
WS=$1; L=${2:-6}; CLI="timeout 300 $REPO/.venv/bin/llm-finetuning"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r | head -1)
bomb() { echo "x_lol0: &l0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]"
  for i in $(seq 1 $L); do p=$((i-1)); echo "x_lol$i: &l$i [*l$p, *l$p, *l$p, *l$p, *l$p, *l$p, *l$p, *l$p, *l$p, *l$p]"; done; }
cp $R/train/config.yaml bomb.yaml; bomb >> bomb.yaml
( ulimit -v 6291456; s=$(date +%s.%N); out=$($CLI validate-config bomb.yaml --no-rehearse 2>&1); rc=$?; echo "validate-config rc=$rc $(echo "$(date +%s.%N) - $s" | bc | cut -c1-6)s: $(echo "$out" | grep -iE "error|lol" | head -2 | cut -c1-160)" )
cp $R/train/config.yaml config.save; bomb >> $R/train/config.yaml
( ulimit -v 6291456; s=$(date +%s.%N); out=$($CLI check-inspection-gate $R 2>&1); rc=$?; echo "gate rc=$rc $(echo "$(date +%s.%N) - $s" | bc | cut -c1-6)s: $(echo "$out" | head -2 | tr '\n' ' ' | cut -c1-200)" )
( ulimit -v 6291456; s=$(date +%s.%N); out=$($CLI list-runs 2>&1); rc=$?; echo "list-runs rc=$rc $(echo "$(date +%s.%N) - $s" | bc | cut -c1-6)s: $(echo "$out" | tail -1 | cut -c1-160)" )
cp config.save $R/train/config.yaml

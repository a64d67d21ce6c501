#!/bin/bash
# usage: fifo.sh WS  -- a gated workspace (setup.sh); plants a FIFO (no writer) in each place a door reads, runs the
# doors with timeout 60 each: rc 124 = a hang. Each FIFO is removed after its probe.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
WS=$1; CLI="$REPO/.venv/bin/llm-finetuning"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
probe() { # $1 label, $2 path to replace by fifo, rest: commands
  local label=$1 p=$2; shift 2
  [ -e "$p" ] && mv "$p" "$p.save"; mkfifo "$p"
  for c in "$@"; do
    s=$(date +%s.%N); out=$(timeout 60 $CLI $c 2>&1); rc=$?; e=$(date +%s.%N)
    printf '%-28s %-40s rc=%-3s %5.1fs %s\n' "$label" "${c%% /*}" $rc $(echo "$e - $s" | bc) "$(echo "$out" | tail -1 | cut -c1-150)"
  done
  rm -f "$p"; [ -e "$p.save" ] && mv "$p.save" "$p"
}
probe model-extra-fifo $WS/models/tiny/extra.bin "check-inspection-gate $R" "training-status $R" "validate-config $R/train/config.yaml"
probe model-tokenizer-fifo $WS/models/tiny/tokenizer.json "check-inspection-gate $R"
probe train-fifo $R/train/x.txt "check-inspection-gate $R" "list-runs"
probe data-fifo $WS/data.jsonl "check-inspection-gate $R"
probe samples-fifo $R/inspection/samples.jsonl "check-inspection-gate $R" "inspect-rewards $R"
probe verdict-fifo $R/inspection/verdict.json "check-inspection-gate $R" "list-runs"
probe rewcode-fifo $R/inspection/reward_code/rew.py "check-inspection-gate $R"
probe rew-fifo $WS/rew.py "check-inspection-gate $R" "list-rewards"
probe runjson-fifo $R/run.json "training-status $R" "list-runs" "diagnose-run $R"
mkdir -p $R/train/logs
probe progress-fifo $R/train/logs/progress.jsonl "training-status $R" "diagnose-run $R"
probe stdout-fifo $R/train/logs/stdout.log "training-status $R"
probe request-fifo $R/train/request.json "training-status $R" "list-runs"
probe config-fifo $R/train/config.yaml "list-runs" "training-status $R" "check-inspection-gate $R"
rmdir $R/train/logs 2>/dev/null
echo "final gate: $(timeout 120 $CLI check-inspection-gate $R 2>&1 | tail -1)"

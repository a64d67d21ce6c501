#!/bin/bash
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); export REPO
# data-loss / escape probes on ws-quick (gated, never launched) and base (trained)
CLI="timeout 300 $REPO/.venv/bin/llm-finetuning"
V=/tmp/r13/victim; mkdir -p $V; echo "user data" > $V/file.txt; echo "user report" > $V/report.json
WS=/tmp/r13/ws-quick; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
rm -rf $R/json
echo "D1 check-environment --run with env-report.json a link to a file outside: expected refusal or link replaced, victim intact"
ln -sfn $V/report.json $R/env-report.json
$CLI check-environment --run $R > d1.log 2>&1; echo "  rc=$? victim: $(head -c 60 $V/report.json | tr '\n' ' ') link: $(readlink $R/env-report.json)"
rm -f $R/env-report.json
echo "D2 train/logs/stdout.log a link to a file outside, then launch: expected refusal, victim intact"
mkdir -p $R/train/logs; ln -sfn $V/file.txt $R/train/logs/stdout.log
$CLI launch-training $R > d2.log 2>&1; echo "  rc=$? $(tail -2 d2.log | tr '\n' ' ' | cut -c1-300)"
sleep 5; echo "  victim: $(head -c 80 $V/file.txt | tr '\n' ' ')"
WS=/tmp/r13/base; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
echo "D3 emit-config with the same run name over a trained run: expected refusal, checkpoints/inspection intact"
ls $R/checkpoints | head -3 > /tmp/r13/d3-before; md5sum $R/inspection/samples.jsonl $R/train/train.py > /tmp/r13/d3-md5
$CLI emit-config --model tiny --dataset tiny --gpu cpu --rewards '[{"name":"rew.nonempty","params":{},"weight":1.0}]' --run-name r --override max_steps=8 > d3.log 2>&1
echo "  rc=$? $(tail -3 d3.log | tr '\n' ' ' | cut -c1-300)"; md5sum -c /tmp/r13/d3-md5 2>&1 | tr '\n' ' '; ls $R/checkpoints | head -3 | diff - /tmp/r13/d3-before >/dev/null && echo " ckpts same"
echo "D4 export-model twice (second without --archive-previous), and with a file in export/: expected refusal, nothing lost"
$CLI export-model $R --allow-unpromoted > d4a.log 2>&1; echo "  first rc=$? $(tail -1 d4a.log | cut -c1-200)"
echo "my notes" > $R/export/NOTES.txt 2>/dev/null || { mkdir -p $R/export; echo "my notes" > $R/export/NOTES.txt; }
$CLI export-model $R --allow-unpromoted > d4b.log 2>&1; echo "  second rc=$? $(tail -2 d4b.log | tr '\n' ' ' | cut -c1-300)"; echo "  notes: $(cat $R/export/NOTES.txt 2>&1)"
$CLI export-model $R --allow-unpromoted --archive-previous > d4c.log 2>&1; echo "  archive rc=$? $(tail -2 d4c.log | tr '\n' ' ' | cut -c1-300)"; echo "  notes now: $(find $R -name NOTES.txt)"
echo "D5 resume-training a succeeded run: expected refusal, nothing changed"
$CLI resume-training $R > d5.log 2>&1; echo "  rc=$? $(tail -2 d5.log | tr '\n' ' ' | cut -c1-300)"

#!/bin/bash
# F: a failed run's signed logs replaced by links to another (succeeded) run's files, in another workspace
# expected: status still failed, no steps/metrics taken from the other run
CLI="timeout 300 $REPO/.venv/bin/llm-finetuning"
FAILED=$(ls -d /tmp/r13/ws-lazyopen/runs/*-r); GOOD=$(ls -d /tmp/r13/base/runs/2026-12-06-r)
export LLM_FINETUNING_WORKSPACE=/tmp/r13/ws-lazyopen
echo "before: $($CLI training-status $FAILED 2>&1 | head -1)"
for f in progress.jsonl saves.jsonl train-begin.json outcome.json exit.json exit-code; do
  rm -f $FAILED/train/logs/$f; ln -s $GOOD/train/logs/$f $FAILED/train/logs/$f; done
echo "F1 logs as links: $($CLI training-status $FAILED 2>&1 | head -2 | tr '\n' ' ' | cut -c1-300)"
echo "   list: $($CLI list-runs 2>&1 | head -2 | tr '\n' ' ')"
rm -rf $FAILED/train/logs.bak; mv $FAILED/train/logs $FAILED/train/logs.bak; ln -s $GOOD/train/logs $FAILED/train/logs
echo "F2 logs folder a link: $($CLI training-status $FAILED 2>&1 | head -2 | tr '\n' ' ' | cut -c1-300)"
rm $FAILED/train/logs; mv $FAILED/train/logs.bak $FAILED/train/logs
ln -sfn $GOOD/checkpoints $FAILED/checkpoints
echo "F3 checkpoints a link to another run's: $($CLI training-status $FAILED 2>&1 | head -2 | tr '\n' ' ' | cut -c1-300)"
echo "   diagnose: $($CLI diagnose-run $FAILED 2>&1 | head -3 | tr '\n' ' ' | cut -c1-300)"

#!/bin/bash
# usage: person_folder.sh WS  -- WS from setup.sh. A person's own project folder proj/ holds files whose names are
# run files (training-brief.md, env-report.json, progress.png, promotion-report.md, README.md, checkpoints/notes.txt,
# inspection/notes.md, archive/old.txt). emit-config --run-dir proj, then check-environment --run, sample,
# training-status --plot. FILES="..." picks the files (default: all above). Prints each person's file that changed or vanished.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
WS=$1; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS
rm -rf proj; mkdir -p proj/checkpoints proj/inspection proj/archive proj/eval proj/data proj/train
FILES=${FILES:-training-brief.md env-report.json progress.png promotion-report.md promotion.json README.md checkpoints/notes.txt inspection/notes.md inspection/review.md archive/old.txt run.json}
for f in $FILES; do
  echo "the person's own $f" > proj/$f; done
(cd proj && sha256sum $(find . -type f | sort)) > person.sha
step() { echo "== $1: $2"; (cd proj && sha256sum -c ../person.sha 2>/dev/null | grep -v ': OK$' | sed 's/^/   CHANGED: /'); }
$CLI emit-config --model $WS/models/tiny --dataset $WS/data.jsonl --gpu cpu --rewards '[{"name":"rew.nonempty"}]' --run-dir proj \
  --override max_steps=2 --override per_device_train_batch_size=4 --override num_generations=4 --override max_completion_length=12 > emit.log 2>&1
step emit "rc=$? $(tail -1 emit.log | cut -c1-150)"
$CLI check-environment --run proj > env.log 2>&1; step check-environment "rc=$? $(tail -1 env.log | cut -c1-120)"
$CLI sample-completions proj --num-prompts 4 > s.log 2>&1; step sample "rc=$? $(tail -1 s.log | cut -c1-120)"
$CLI inspect-rewards proj > i.log 2>&1; step inspect "rc=$? $(tail -1 i.log | cut -c1-120)"
$CLI training-status proj --plot > ts.log 2>&1; step training-status "rc=$? $(tail -1 ts.log | cut -c1-120)"
ls proj/archive proj/inspection | tr '\n' ' '; echo

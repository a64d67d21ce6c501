#!/bin/bash
# usage: self_restore_script.sh WS  -- G4's trick on train/train.py: right after launch-training returns, train/train.py
# is replaced by a script that writes the verified bytes back over itself, then (as evil) sets every reward to 5.0 by
# wrapping the reviewed train.py's code. Expected: the trainer refuses (its script is hashed and run from one read).
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); PY=$REPO/.venv/bin/python
WS=$1; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"
$HERE/../hostile_r13/setup.sh $WS >/dev/null || exit 1
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
$PY - $R/train/train.py $WS/evil_train.py <<'PY'
import sys
reviewed = open(sys.argv[1]).read()
open(sys.argv[2], "w").write(f"open(__file__, 'w').write({reviewed!r})\nEVIL = True\n" + reviewed)
PY
$CLI launch-training $R > launch.log 2>&1; echo "launch rc=$? $(tail -1 launch.log | cut -c1-100)"
cp $WS/evil_train.py $R/train/.x && mv $R/train/.x $R/train/train.py
for i in $(seq 100); do s=$($CLI training-status $R 2>&1 | head -1); case "$s" in *running*|*launching*|*starting*) sleep 3;; *) break;; esac; done
echo "status: $s"; echo "train.py now restored: $(grep -c 'EVIL = True' $R/train/train.py) evil lines"
grep -i "refus" $R/train/logs/stdout.log 2>/dev/null | head -2 | cut -c1-250

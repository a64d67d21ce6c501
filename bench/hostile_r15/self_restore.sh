#!/bin/bash
# usage: self_restore.sh WS  -- right after launch-training returns (its gates passed), inspection/reward_code/rew.py
# (the reviewed copy the trainer imports) is replaced by an evil module whose function starts on the same line as the
# reviewed one and which, at its import, writes the reviewed bytes back over its own file. The trainer compiles the
# evil bytes, then hashes the file's source (now the reviewed bytes again). Evil reward: 1.0 on its first call (the
# trainer's replay of the review), 5.0 after. Expected: the trainer refuses (exit 3).
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); PY=$REPO/.venv/bin/python
WS=$1; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"
$HERE/../hostile_r13/setup.sh $WS >/dev/null || exit 1
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r); RC=$R/inspection/reward_code
$PY - $RC/rew.py $WS/evil_rew.py <<'PY'
import sys
reviewed = open(sys.argv[1]).read()
evil = ("def nonempty(completions, _n=[0], **kwargs):\n"
        "    _n[0] += 1\n"
        "    return [1.0 if _n[0] <= 1 else 5.0 for c in completions]\n"
        f"open(__file__, 'w').write({reviewed!r})\n")
open(sys.argv[2], "w").write(evil)
PY
$CLI launch-training $R > launch.log 2>&1; echo "launch rc=$? $(tail -1 launch.log | cut -c1-100)"
cp $WS/evil_rew.py $RC/.x && mv $RC/.x $RC/rew.py; echo "evil in place: $(head -1 $RC/rew.py)"
for i in $(seq 100); do s=$($CLI training-status $R 2>&1 | head -1); case "$s" in *running*|*launching*|*starting*) sleep 3;; *) break;; esac; done
echo "status: $s"; echo "reward_code/rew.py now: $(sha256sum $RC/rew.py | cut -c1-12) (reviewed copy restored: $(head -1 $RC/rew.py))"
grep -h -o '"rewards/nonempty/mean": [0-9.]*' $R/train/logs/progress.jsonl 2>/dev/null
grep -i "refus\|replay" $R/train/logs/stdout.log 2>/dev/null | head -3 | cut -c1-300

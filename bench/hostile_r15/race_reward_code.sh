#!/bin/bash
# usage: race_reward_code.sh WS log|K  -- the trainer imports inspection/reward_code/rew.py (read 1) and then hashes its
# source (read again). log: launch with racer.py logging each open/close of the file (calibration). K: racer.py puts an
# evil rew.py in place right after the K-th close after the launch returned, and the reviewed one back after the
# next close; evil: 1.0 on its first call (the replay), 5.0 after. Expected: the trainer refuses (exit 3).
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); PY=$REPO/.venv/bin/python
WS=$1; K=$2; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"
$HERE/../hostile_r13/setup.sh $WS >/dev/null || exit 1
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r); RC=$R/inspection/reward_code
cat > $WS/evil_rew.py <<'PY'
n = [0]
def nonempty(completions, **kwargs):
    n[0] += 1
    return [1.0 if n[0] <= 1 else 5.0 for c in completions]
PY
if [ $K = log ]; then $PY $HERE/racer.py log $RC rew.py 150 > racer.log 2>&1 & else $PY $HERE/racer.py swap $RC rew.py $WS/evil_rew.py $K 150 > racer.log 2>&1 & fi
RP=$!; sleep 1
$CLI launch-training $R > launch.log 2>&1; echo "launch rc=$? $(tail -1 launch.log | cut -c1-100)"; date +%s.%N > t_launch
for i in $(seq 100); do s=$($CLI training-status $R 2>&1 | head -1); case "$s" in *running*|*launching*|*starting*) sleep 3;; *) break;; esac; done
echo "status: $s"; kill $RP 2>/dev/null; wait $RP 2>/dev/null
cat racer.log | tail -30
grep -h -o '"rewards/nonempty/mean": [0-9.]*' $R/train/logs/progress.jsonl 2>/dev/null
grep -i "refus\|replay" $R/train/logs/stdout.log 2>/dev/null | head -3 | cut -c1-300

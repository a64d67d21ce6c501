#!/bin/bash
# F3: a grader that reads its rubric with a plain open() of a file under /dev/shm (the reads pin leaves /dev/ out):
# baseline measured with the rubric saying 0, rubric changed to 1, promote-checkpoint -> PROMOTE, +100 points, signed.
# Promised (rewards/reads.py): "evaluate_model keeps the graders' pins in the baseline and promote refuses a baseline
# whose graders read other content now". Not the excluded child-process route: a plain open() in the grader.
# usage: f3_promote_devshm.sh WS [KNOB] (KNOB=/proc/self/root/<ws>/rubric.txt with REALKNOB=<ws>/rubric.txt: any file, through /proc)
#  (WS: a workspace with a succeeded run runs/*-r, e.g. from g1_after_replay.sh)
WS=${1:-/tmp/r16/ws_g1shm}; KNOB=${2:-/dev/shm/r16grade}; REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export REPO; export PYTHONPATH=$REPO
REALKNOB=${REALKNOB:-$KNOB}
CLI="timeout 900 $PY -m mcp_server.cli"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
head -20 data.jsonl > goldens.jsonl
cat > shmgrade.py <<PY
def g(completions, **kwargs):
    v = float(open("$KNOB").read())
    return [v for _ in completions]
PY
echo '[{"name": "shmgrade.g"}]' > graders.json
echo 0 > $REALKNOB
$CLI evaluate-model $WS/models/tiny --goldens goldens.jsonl --graders @graders.json --run $R > base.log 2>&1; echo "baseline rc=$? $(grep -i 'pass rate\|passed\|baseline' base.log | tail -2 | tr '\n' ' ' | cut -c1-200)"
echo 1 > $REALKNOB
$CLI promote-checkpoint $R > promote.log 2>&1; echo "promote rc=$?"; head -5 promote.log | cut -c1-220
$PY -c "import json; d=json.load(open('$R/promotion.json')); print('promotion.json:', d.get('verdict'), 'signed' if d.get('mac') else 'unsigned')"
rm -f $REALKNOB

#!/bin/bash
# usage: path_loaded_helper.sh WS [spec|zip|runpy]  -- the reward loads a workspace helper by path, not by a name on
# sys.path: spec (importlib.util.spec_from_file_location + exec_module of helpers/h.py), zip (a zip archive put on
# sys.path: zipimport), runpy (runpy.run_path of helpers/h.py). The helper's value changed after the verdict (1 -> 5).
# Expected: the gate closes naming it (or the review refuses the form). Prints review, verdict and gate.
# LAUNCH=1 (spec only): the helper defines val(); reviewed: 1.0; after the verdict: 1.0 on its first call (the
# trainer's replay of the review) and 5.0 after; then launch-training and print the rewards logged.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); PY=$REPO/.venv/bin/python
WS=$1; MODE=${2:-spec}; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"
$HERE/../hostile_r13/setup.sh $WS >/dev/null || exit 1
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r); mkdir -p helpers
mk() { if [ "$LAUNCH" = 1 ]; then [ $1 = 1 ] && printf "def val():\n    return 1.0\n" > helpers/h.py || printf "n = [0]\ndef val():\n    n[0] += 1\n    return 1.0 if n[0] <= 1 else 5.0\n" > helpers/h.py; else echo "V = $1.0" > helpers/h.py; fi; (cd helpers && rm -f ../h.zip && $PY -c "import zipfile; z=zipfile.ZipFile('../h.zip','w'); z.write('h.py'); z.close()"); }
mk 1
case $MODE in
 spec) LOAD='import importlib.util; s = importlib.util.spec_from_file_location("h", "'$WS'/helpers/h.py"); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); V = getattr(m, "V", None); val = getattr(m, "val", None)';;
 zip) LOAD='import sys; sys.path.insert(0, "'$WS'/h.zip"); import h; V = h.V; val = None';;
 runpy) LOAD='import runpy; V = runpy.run_path("'$WS'/helpers/h.py")["V"]; val = None';;
esac
cat > rew.py <<PY
$LOAD
def nonempty(completions, **kwargs):
    v = val() if val else V
    return [v for c in completions]
PY
$CLI sample-completions $R --num-prompts 13 >/dev/null 2>&1; $CLI inspect-rewards $R > insp.log 2>&1; echo "inspect rc=$? $(grep -iE "^error|reads" insp.log | head -2 | cut -c1-200)"
$CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest > verdict.log 2>&1; echo "verdict rc=$? $(tail -1 verdict.log | cut -c1-150)"
mk 5
echo "gate after the helper changed: $($CLI check-inspection-gate $R 2>&1 | head -3 | tr '\n' ' ' | cut -c1-250)"
[ "$LAUNCH" = 1 ] || exit 0
$CLI launch-training $R > launch.log 2>&1; echo "launch rc=$? $(tail -1 launch.log | cut -c1-120)"
for i in $(seq 100); do s=$($CLI training-status $R 2>&1 | head -1); case "$s" in *running*|*launching*|*starting*) sleep 3;; *) break;; esac; done
echo "status: $s"
grep -h -o '"rewards/nonempty/mean": [0-9.]*' $R/train/logs/progress.jsonl 2>/dev/null
grep -i "refus\|replay" $R/train/logs/stdout.log 2>/dev/null | head -3 | cut -c1-300

#!/bin/bash
# usage: so_ext.sh WS [counter]  -- a reward imports a C extension helper (fastk.so) built beside it in the workspace.
# Reviewed: fastk.val() == 1.0. After the verdict the .so is rebuilt: "const" returns 5.0 always (the replay should
# see it), "counter" returns 1.0 on its first call (the trainer's replay of the review) and 5.0 after.
# The .so is put in the workspace root (where the review imports from) and in the run directory (the trainer's cwd
# on its sys.path). Expected: the gate or the trainer refuses (the reward code changed). Prints gate, launch, status, rewards logged.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd)
WS=$1; MODE=${2:-counter}; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"; PY=$REPO/.venv/bin/python
$HERE/../hostile_r13/setup.sh $WS >/dev/null || exit 1
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
INC=$($PY -c "import sysconfig;print(sysconfig.get_paths()['include'])"); SUF=$($PY -c "import sysconfig;print(sysconfig.get_config_var('EXT_SUFFIX'))")
build() { # $1 C expression for the value, given calls
cat > fastk.c <<C
#include <Python.h>
static long calls = 0;
static PyObject* val(PyObject* s, PyObject* a) { calls++; return PyFloat_FromDouble($1); }
static PyMethodDef M[] = {{"val", val, METH_NOARGS, ""}, {0}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "fastk", 0, -1, M};
PyMODINIT_FUNC PyInit_fastk(void) { return PyModule_Create(&D); }
C
gcc -shared -fPIC -I$INC fastk.c -o fastk.tmp && cp fastk.tmp $R/fastk.tmp && mv fastk.tmp fastk$SUF && mv $R/fastk.tmp $R/fastk$SUF; rm -f fastk.c
}
build "1.0"
cat > rew.py <<'PY'
import fastk
def nonempty(completions, **kwargs):
    v = fastk.val()
    return [v for c in completions]
PY
$CLI sample-completions $R --num-prompts 13 >/dev/null 2>&1; $CLI inspect-rewards $R >insp.log 2>&1
$CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest > verdict.log 2>&1 || { cat verdict.log; exit 1; }
echo "review.md mentions fastk: $(grep -c fastk $R/inspection/review.md); reward_code copy: $(ls $R/inspection/reward_code)"
if [ $MODE = const ]; then build "5.0"; else build "calls > 1 ? 5.0 : 1.0"; fi
echo "gate after swapping fastk$SUF: $($CLI check-inspection-gate $R 2>&1 | head -1 | cut -c1-120)"
$CLI launch-training $R > launch.log 2>&1; echo "launch rc=$? $(tail -1 launch.log | cut -c1-150)"
for i in $(seq 100); do s=$($CLI training-status $R 2>&1 | head -1); case "$s" in *running*|*launching*|*starting*) sleep 3;; *) break;; esac; done
echo "status: $s"
grep -h -o '"rewards/nonempty/mean": [0-9.]*' $R/train/logs/progress.jsonl 2>/dev/null | sort | uniq -c
grep -i "refus\|replay" $R/train/logs/stdout.log 2>/dev/null | head -3 | cut -c1-300

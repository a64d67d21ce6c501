#!/bin/bash
# usage: promote_so.sh WS [so|subproc]  -- (subproc: the grader reads its pass value through /bin/cat of gk.txt instead)
# WS holds a succeeded run (e.g. so_ext.sh's). A grader (grade.g) imports a C extension gk.so
# from the workspace. The base model's baseline is measured with gk.val() == 0.0 (every golden fails); then gk.so is
# rebuilt to return 1.0 and promote-checkpoint judges the run's checkpoint. Expected: promote refuses (the graders
# changed since the baseline). A PROMOTE = a forged promotion decision.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=$REPO/.venv/bin/python
WS=$1; MODE=${2:-so}; CLI="timeout 900 $REPO/.venv/bin/llm-finetuning"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
INC=$($PY -c "import sysconfig;print(sysconfig.get_paths()['include'])"); SUF=$($PY -c "import sysconfig;print(sysconfig.get_config_var('EXT_SUFFIX'))")
build() { [ $MODE = subproc ] && { echo $1 > gk.txt; return; }; cat > gk.c <<C
#include <Python.h>
static PyObject* val(PyObject* s, PyObject* a) { return PyFloat_FromDouble($1); }
static PyMethodDef M[] = {{"val", val, METH_NOARGS, ""}, {0}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "gk", 0, -1, M};
PyMODINIT_FUNC PyInit_gk(void) { return PyModule_Create(&D); }
C
gcc -shared -fPIC -I$INC gk.c -o gk.tmp && mv gk.tmp gk$SUF; rm -f gk.c; }
build 0.0
if [ $MODE = subproc ]; then cat > grade.py <<PY
import subprocess
def g(completions, **kwargs):
    v = float(subprocess.check_output(["/bin/cat", "$WS/gk.txt"]))
    return [v for c in completions]
PY
else cat > grade.py <<'PY'
import gk
def g(completions, **kwargs):
    return [gk.val() for c in completions]
PY
fi
rm -rf eval
head -20 data.jsonl > golds.jsonl
$CLI evaluate-model $WS/models/tiny --goldens golds.jsonl --graders '[{"name":"grade.g"}]' --run $R > base.log 2>&1; echo "baseline rc=$? $(grep -i "pass rate\|baseline" base.log | head -2 | cut -c1-150)"
build 1.0
$CLI promote-checkpoint $R > promote.log 2>&1; echo "promote rc=$? $(grep -E "PROMOTE|REJECT|refus|pass rate" promote.log | head -4 | cut -c1-200)"

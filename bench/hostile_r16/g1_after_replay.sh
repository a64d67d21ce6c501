#!/bin/bash
# G1: a reward input with no pin (os.path.exists / os.stat: no audit event; MODE=subproc: /bin/cat) changed AFTER the
# trainer's replay (which runs once, before step 1). Expected: training stops or refuses (what trains is what was
# reviewed). MODE fd: a file opened once at import, re-read through that fd; reload: importlib.reload of a helper.
# usage: g1_after_replay.sh WS [exists|subproc|fd|reload|devshm|listdir|sqlite]  (devshm: a plain open() of /dev/shm/r16knob at each call)
WS=${1:-/tmp/r16/ws_g1}; MODE=${2:-exists}; REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export REPO; export PYTHONPATH=$REPO
CLI="timeout 600 $PY -m mcp_server.cli"
mkdir -p $WS; rm -rf $WS/*; echo 1 > $WS.g1knob
if [ $MODE = exists ]; then
REW="import os
def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]
    v = 5.0 if os.path.exists('$WS/flag') else 1.0
    return [v if t.strip() else 0.0 for t in texts]"
elif [ $MODE = fd ]; then
REW="_f = open('$WS.knob')
def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]
    _f.seek(0); v = float(_f.read())
    return [v if t.strip() else 0.0 for t in texts]"
elif [ $MODE = devshm ]; then
REW="def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]
    v = float(open('/dev/shm/r16knob').read())
    return [v if t.strip() else 0.0 for t in texts]"
elif [ $MODE = listdir ]; then
REW="import os
def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]
    v = float(len(os.listdir('$WS.d')))
    return [v if t.strip() else 0.0 for t in texts]"
elif [ $MODE = sqlite ]; then
REW="import sqlite3
_db = sqlite3.connect('$WS.db')
def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]
    v = float(_db.execute('select v from k').fetchone()[0])
    return [v if t.strip() else 0.0 for t in texts]"
elif [ $MODE = reload ]; then
REW="import importlib, sys
sys.path.insert(0, '$WS.d')
import knobmod
def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]
    v = importlib.reload(knobmod).V
    return [v if t.strip() else 0.0 for t in texts]"
else
REW="import subprocess
def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]
    v = float(subprocess.check_output(['/bin/cat', '$WS.knob.txt']))
    return [v if t.strip() else 0.0 for t in texts]"
echo 1 > $WS.knob.txt
fi
echo 1 > /dev/shm/r16knob; rm -f $WS.db; python3 -c "import sqlite3; c=sqlite3.connect('$WS.db'); c.execute('create table k(v)'); c.execute('insert into k values (1)'); c.commit()"; echo 1 > $WS.knob; mkdir -p $WS.d; echo 'V = 1.0' > $WS.d/knobmod.py
cat > $WS.rew.py <<<"$REW"
mkdir -p $WS; cp $WS.rew.py $WS/rew.py.keep
R=$(REW_PY="$REW" STEPS=6 $(dirname "$0")/setup.sh $WS | tail -1) || exit 1
[ -d "$R" ] || { echo "setup failed: $R"; exit 1; }
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS
echo "gate: $($CLI check-inspection-gate $R 2>&1 | head -1 | cut -c1-120)"
$CLI launch-training $R > launch.log 2>&1; echo "launch rc=$? $(tail -1 launch.log | cut -c1-120)"
# wait for step 1 (after the replay), then change the input
for i in $(seq 300); do grep -q '"step": 1\b\|"step":1\b' $R/train/logs/progress.jsonl 2>/dev/null && break; sleep 1; done
grep -i "replay" $R/train/logs/stdout.log | head -2 | cut -c1-200
case $MODE in exists) touch $WS/flag;; fd) echo 5 > $WS.knob;; devshm) echo 5 > /dev/shm/r16knob;; listdir) touch $WS.d/a $WS.d/b $WS.d/c $WS.d/d;; sqlite) python3 -c "import sqlite3; c=sqlite3.connect('$WS.db'); c.execute('update k set v=5'); c.commit()";; reload) echo 'V = 5.0' > $WS.d/knobmod.py;; *) echo 5 > $WS.knob.txt;; esac; echo "input changed after step 1"
for i in $(seq 200); do s=$($CLI training-status $R 2>&1 | head -1); case "$s" in *running*|*launching*|*starting*|*loading*) sleep 3;; *) break;; esac; done
echo "status: $s"
grep -h -o '"rewards/nonempty/mean": [0-9.]*' $R/train/logs/progress.jsonl
$CLI list-runs 2>&1 | tail -2

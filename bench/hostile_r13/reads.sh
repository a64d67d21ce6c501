#!/bin/bash
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); export REPO
# usage: reads.sh NAME  -- reward reads a knob through channel NAME; knob changed after the verdict; launch.
# expected: gate or trainer refuses naming the knob; actual printed.
N=$1; WS=/tmp/r13/ws-$N; CLI=$REPO/.venv/bin/llm-finetuning
rm -rf $WS; mkdir -p $WS
case $N in
 env)     BODY='v = float(os.environ.get("R13_KNOB", "1"))';;
 stat)    BODY='v = float(os.path.getsize(os.path.join(HERE, "knob")))';;
 readlink) BODY='v = float(os.readlink(os.path.join(HERE, "knob")))';;
 listdir) BODY='v = float(len(os.listdir(os.path.join(HERE, "knobdir"))))';;
 subproc) BODY='v = float(subprocess.check_output(["/bin/cat", os.path.join(HERE, "knob")]))';;
 dbm)     BODY='import dbm; v = float(dbm.open(os.path.join(HERE, "knobdb"), "r")[b"k"])';;
 npfrom)  BODY='import numpy; v = float(numpy.fromfile(os.path.join(HERE, "knob"), sep=" ")[0])';;
 xattr)   BODY='v = float(os.getxattr(os.path.join(HERE, "knob"), "user.k"))';;
 lazyopen) BODY='v = float(open(os.path.join(HERE, "late.txt")).read()) if "train.py" in " ".join(sys.argv) else 1.0';;
 lazyimport) BODY='v = (sys.path.insert(0, HERE) or __import__("helper2").V) if "train.py" in " ".join(sys.argv) else 1.0';;
 mtime)   BODY='v = float(int(os.stat(os.path.join(HERE, "knob")).st_mtime) % 7 + 1)';;
esac
mkknob() { # $1 value
 case $N in
  env) export R13_KNOB=$1;;
  stat) head -c $1 /dev/zero > $WS/knob;;
  readlink) rm -f $WS/knob; ln -s $1 $WS/knob;;
  listdir) rm -rf $WS/knobdir; mkdir $WS/knobdir; for i in $(seq $1); do touch $WS/knobdir/f$i; done;;
  subproc|npfrom) echo $1 > $WS/knob;;
  dbm) $REPO/.venv/bin/python -c "import dbm; d=dbm.open('$WS/knobdb','n'); d[b'k']=b'$1'; d.close()";;
  xattr) echo x > $WS/knob; setfattr -n user.k -v $1 $WS/knob 2>/dev/null || $REPO/.venv/bin/python -c "import os; os.setxattr('$WS/knob','user.k',b'$1')";;
  lazyopen) echo $1 > $WS/late.txt; [ $1 = 1 ] && rm -f $WS/late.txt;;
  lazyimport) echo "V = float($1)" > $WS/helper2.py; [ $1 = 1 ] && rm -f $WS/helper2.py;;
  mtime) echo x > $WS/knob; touch -d @$((1700000000 + $1 - 1)) $WS/knob;;
 esac
}
mkknob 1; cd $WS
$HERE/setup.sh $WS > /dev/null 2>/tmp/r13/setup-$N.err || true
# setup.sh wipes the workspace: recreate the knob and the reward, then redo sampling
mkknob 1; cd $WS
cat > $WS/rew.py <<PY
import os, subprocess, sys
HERE = "$WS"
def nonempty(completions, **kwargs):
    $BODY
    return [v for c in completions]
PY
export LLM_FINETUNING_WORKSPACE=$WS
R=$(ls -d $WS/runs/*-r)
timeout 300 $CLI sample-completions $R --num-prompts 13 >/dev/null 2>&1; timeout 300 $CLI inspect-rewards $R > insp.log 2>&1
timeout 300 $CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest >/dev/null 2>&1
grep -o "reads[^|]*" $R/inspection/review.md | head -3
mkknob 5
echo "gate: $(timeout 300 $CLI check-inspection-gate $R 2>&1 | tail -2)"
timeout 300 $CLI launch-training $R > launch.log 2>&1; echo "launch rc=$? $(tail -3 launch.log)"
for i in $(seq 60); do s=$(timeout 300 $CLI training-status $R 2>&1 | head -1); case "$s" in *running*|*launching*|*starting*) sleep 3;; *) break;; esac; done
echo "status: $s"
grep -h -o '"reward": [0-9.]*' $R/train/logs/progress.jsonl 2>/dev/null | sort | uniq -c | head -3
grep -i "refus" $R/train/logs/stdout.log 2>/dev/null | head -2

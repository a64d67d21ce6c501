#!/bin/bash
# Round 17, b02 (copied from the blind round's /tmp/r17/b02.sh, run against this checkout: REPO, PY override):
# <run>/.launch.lock as a symbolic link (case A) or a hard link (case B) to a file outside the workspace;
# launch-training and resume-training opened it O_RDWR|O_CREAT without O_NOFOLLOW and truncated it, even when
# every gate refused. Prints BROKEN when an outside file lost its content, else HELD.
# usage: b02_launch_lock_link.sh [WS]
set -u
HERE=$(cd "$(dirname "$0")" && pwd); REPO=${REPO:-$(cd "$HERE/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}
export PYTHONPATH=$REPO REPO PY
WS=${1:-/tmp/r17b/ws_b02}; OUT=$WS.outside
R=$(NOREVIEW=1 timeout 600 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"
rm -rf "$OUT"; mkdir -p "$OUT"; broken=0
for case in symlink hardlink; do
  printf 'a file of the person, outside the workspace\n' > "$OUT/notes-$case.txt"; rm -f "$R/.launch.lock"
  if [ $case = symlink ]; then ln -s "$OUT/notes-$case.txt" "$R/.launch.lock"; else ln "$OUT/notes-$case.txt" "$R/.launch.lock"; fi
  for cmd in launch-training resume-training; do
    printf 'a file of the person, outside the workspace\n' > "$OUT/notes-$case.txt"
    timeout 600 $PY -m mcp_server.cli $cmd "$R" > $cmd.log 2>&1; rc=$?
    size=$(stat -c %s "$OUT/notes-$case.txt")
    echo "$case, $cmd: rc=$rc ($(grep -m1 -i 'refus\|started' $cmd.log | cut -c1-150)); outside file now $size bytes"
    grep -q "a file of the person" "$OUT/notes-$case.txt" || broken=1
  done
done
[ $broken = 1 ] && echo BROKEN || echo HELD

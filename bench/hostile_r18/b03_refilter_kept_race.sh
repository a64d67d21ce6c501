#!/bin/bash
# Round 18 (copied from the round; REPO, PY override). Held since: what a tool signs or pins of a file it writes is
# the digest of the bytes it produced (workspace.written_digest), never the file read back; a replaced file is refused.
# r18 b03 (gate bypass): resume-training --refilter writes data/refilter-<n>/kept.jsonl, then (refilter._move_verdict)
# loads the config's data again to fingerprint the rows and pins the file into inspection/verdict.json. A racer that
# replaces kept.jsonl in that gap (here: every prompt rewritten, the same row count) has the verdict pin its rows:
# the gate opens and the resumed run trains on prompts nobody reviewed (none of them a row of the reviewed data) and
# is recorded succeeded. Exit 1 while the break exists (the resumed trainer logged an R18-UNREVIEWED prompt, state
# succeeded), 0 once fixed. usage: b03_refilter_kept_race.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/r18/b03ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
# a reward with a per-prompt outcome (even answers pass), so the re-filter drops the logged prompts and keeps the rest
export REW_PY='def nonempty(completions, answer=None, **kwargs):
    return [1.0 if int(a) % 2 == 0 else 0.0 for a in answer]'
R=$(STEPS=8 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
state() { timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null; }
timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
for i in $(seq 1 150); do ls "$R/checkpoints" 2>/dev/null | grep -q checkpoint-3 && break; sleep 2; done
timeout 600 $CLI stop-training "$R" > stop.log 2>&1; echo "stop rc=$? $(head -1 stop.log | cut -c1-150)"
for i in $(seq 1 60); do st=$(state); case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done; echo "state=$st"
rm -f "$WS.racer.log"; "$PY" "$HERE/kept_racer.py" "$R" "$WS.racer.log" & RACER=$!
timeout 900 $CLI resume-training "$R" --refilter '{}' > resume.log 2>&1; echo "resume rc=$? $(grep -v '^  \.\.\.' resume.log | head -3 | cut -c1-250)"
kill $RACER 2>/dev/null; echo "racer: $(tr '\n' ' ' < "$WS.racer.log")"
for i in $(seq 1 120); do st=$(state); case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done; echo "state=$st"
grep -m1 "refusing" "$R/train/logs/stdout.log" | cut -c1-300
n=$($PY - "$R" <<'PY'
import glob, sys, pyarrow.parquet as pq
n = 0
for f in glob.glob(sys.argv[1] + "/checkpoints/completions/*.parquet"):
    n += sum("R18-UNREVIEWED" in str(p) for p in pq.read_table(f).column("prompt").to_pylist())
print(n)
PY
)
echo "completions the resumed trainer logged for unreviewed prompts: $n"
[ "$st" = succeeded ] && [ "${n:-0}" -gt 0 ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

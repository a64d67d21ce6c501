#!/bin/bash
# Round 18 (copied from the round; REPO, PY override). Held since: what a tool signs or pins of a file it writes is
# the digest of the bytes it produced (workspace.written_digest), never the file read back; a replaced file is refused.
# r18 b08 (gate: the review is of completions no model wrote): sample-completions writes inspection/samples.jsonl,
# then computes samples.meta.json (the config's pins: the model and data hashed again) and only then hashes
# samples.jsonl FROM THE FILE (sample_files.write_samples_meta: sha256_file) and signs that hash: the sampler vouches
# for whatever the file holds by then. A racer replaces samples.jsonl in that gap with hand-written completions
# (prompts, rows and columns kept): the signed meta vouches for them, inspect-rewards reviews them, the verdict is
# recorded and the gate opens (samples_not_vouched, the check against hand-written samples, passes).
# The run then trains and succeeds (its replays score the stored texts as the review did).
# Exit 1 while the break exists (gate open on R18-HANDWRITTEN samples, run succeeded), 0 once fixed. usage: b08_... [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/r18/b08ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(NOREVIEW=1 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
rm -f "$WS.racer.log"; "$PY" "$HERE/samples_racer.py" "$R" "$WS.racer.log" & RACER=$!
timeout 600 $CLI sample-completions "$R" --num-prompts 13 > sample.log 2>&1; echo "sample rc=$?"
sleep 1; kill $RACER 2>/dev/null; echo "racer: $(tr '\n' ' ' < "$WS.racer.log")"
timeout 600 $CLI inspect-rewards "$R" > inspect.log 2>&1; echo "inspect rc=$? $(grep -m1 -i 'not what the sampler\|hand' inspect.log | cut -c1-200)"
timeout 600 $CLI record-inspection-verdict "$R" --verdict pass --reviewer me --agree-rest > verdict.log 2>&1; echo "verdict rc=$? $(head -1 verdict.log | cut -c1-200)"
timeout 600 $CLI check-inspection-gate "$R" > gate.log 2>&1; gate=$?; echo "gate rc=$gate $(head -1 gate.log | cut -c1-160)"
n=$(grep -c R18-HANDWRITTEN "$R/inspection/samples.jsonl"); echo "reviewed samples that are hand-written: $n"
grep -m2 R18-HANDWRITTEN "$R/inspection/review.md" | cut -c1-160
st=none
if [ $gate = 0 ]; then
  timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
  for i in $(seq 1 120); do
    st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
    case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
  echo "training on the model the hand-written review stands for: $st"; grep -m1 "replayed the review" "$R/train/logs/stdout.log" | cut -c1-200
fi
[ $gate = 0 ] && [ "$n" -gt 0 ] && [ "$st" = succeeded ] && { echo BROKEN; exit 1; }
echo HELD; exit 0

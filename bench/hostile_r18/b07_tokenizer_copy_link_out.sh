#!/bin/bash
# r18 b07 (data loss, outside the workspace): the trainer writes its private tokenizer copy with Path.write_bytes
# (open(..., "wb"): follows a symbolic link, truncates) into a mkdtemp folder of $TMPDIR
# (loaded_weights.verified_copy via script_support.verified_processing_class). A racer plants
# tokenizer_config.json there as a link to a person's file outside the workspace: the launch overwrites that file
# with the model's tokenizer_config.json (and trains on; nothing is refused). Same root as b01, another promise.
# Exit 1 while the break exists (the outside file lost its content), 0 once fixed. usage: b07_... [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/hostile_r18_b07ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
OUT=$WS.outside; rm -rf "$OUT"; mkdir -p "$OUT"; printf 'a file of the person, outside the workspace\n' > "$OUT/notes.txt"
mkdir -p "$WS/tmp"; rm -f "$WS.racer.log"
"$PY" "$HERE/plant_racer.py" "$WS/tmp" "$WS.racer.log" "link:$OUT/notes.txt" & RACER=$!
sleep 1
TMPDIR="$WS/tmp" timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
kill $RACER 2>/dev/null
echo "racer: $(tr '\n' ' ' < "$WS.racer.log")"; echo "state=$st"
echo "outside file now: $(head -c 150 "$OUT/notes.txt" | tr '\n' ' ')"
grep -q "a file of the person" "$OUT/notes.txt" && { echo HELD; exit 0; }
echo BROKEN; exit 1

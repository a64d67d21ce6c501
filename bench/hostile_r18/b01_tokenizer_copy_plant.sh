#!/bin/bash
# r18 b01 (gate bypass): the trainer loads its tokenizer from a "private" copy of the verified model files made by
# tempfile.mkdtemp in $TMPDIR (script_support.verified_processing_class); AutoProcessor.from_pretrained reads every
# file in that folder, not only the verified copies. A racer (inotify) plants additional_chat_templates/default.jinja
# and special_tokens_map.json there while the copy is made: the run trains with another chat template (a system line
# injected into every prompt) and another eos token, and is recorded succeeded. TMPDIR is a folder of the workspace
# (the launch's environment); /tmp works the same for any process of the user.
# Exit 1 while the break exists (the trained checkpoint's template holds the injected line and the run succeeded),
# 0 once fixed. usage: b01_tokenizer_copy_plant.sh [WS]
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}; export PYTHONPATH=$REPO REPO PY
HERE=$(cd "$(dirname "$0")" && pwd)
WS=${1:-/tmp/hostile_r18_b01ws}; export LLM_FINETUNING_STATE_DIR=${WS}_state
R=$(STEPS=2 timeout 900 bash "$REPO/bench/hostile_r16/setup.sh" "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; CLI="$PY -m mcp_server.cli"
mkdir -p "$WS/tmp"; rm -f "$WS.racer.log"
"$PY" "$HERE/plant_racer.py" "$WS/tmp" "$WS.racer.log" template & RACER=$!
sleep 1
TMPDIR="$WS/tmp" timeout 600 $CLI launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
st=none
for i in $(seq 1 120); do
  st=$(timeout 120 $CLI training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
kill $RACER 2>/dev/null
echo "racer: $(cat "$WS.racer.log" | tr '\n' ' ')"
echo "state=$st"
grep -m1 "refusing" "$R/train/logs/stdout.log" | cut -c1-300
if [ "$st" = succeeded ] && grep -q R18-INJECTED "$R/checkpoints/chat_template.jinja" 2>/dev/null; then
  echo "trained checkpoint's chat_template.jinja: $(head -c 120 "$R/checkpoints/chat_template.jinja" | tr '\n' ' ')"
  echo "its eos_token: $(grep -o '"eos_token": "[^"]*"' "$R/checkpoints/tokenizer_config.json") (reviewed: $(grep -o '"eos_token": "[^"]*"' "$WS/models/tiny/tokenizer_config.json"))"
  echo BROKEN; exit 1
fi
grep -q "planted" "$WS.racer.log" || echo "(the racer never saw the private folder in TMPDIR)"
echo HELD; exit 0

#!/bin/bash
# Round 17, b01 (copied from the round; REPO, PY override). Held since: the trainer replays blind probes too
# (rewards.blind_texts); a file named in a child's argv and a variable read are pinned (rewards.read_events).
# usage: b01_unreviewed_texts.sh WS [subproc|glob|env]
# b01: a reward input (a workspace file read through a child process, or an environment variable) changed after
# the verdict so that every REVIEWED completion scores as reviewed, and every other completion scores otherwise.
# The trainer's replay (stored samples) and row probes (rows x reviewed completions) only ever score reviewed
# completions, so they cannot see it. Prints BROKEN when the run trains on the changed reward and succeeds.
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=$REPO/.venv/bin/python; export PYTHONPATH=$REPO REPO
WS=${1:-/tmp/r17h/ws_b01}; export LLM_FINETUNING_STATE_DIR=${WS}_state
MODE=${2:-subproc}   # subproc: a workspace file read through /bin/cat; glob: through sh -c "cat bonus.tx?"; env: a variable
mkdir -p "$WS.keep"; BONUS_FILE="$WS.keep/bonus.txt"; rm -f "$BONUS_FILE"
export REW_PY='import os, re, subprocess
def _bonus():
    if "'$MODE'" == "env":
        return os.environ.get("R17_BONUS", "(?!)")
    if "'$MODE'" == "glob":  # a child reading a file its arguments do not name (no argv pin sees it)
        out = subprocess.run(["/bin/sh", "-c", "cat '$WS'/bonus.tx?"], capture_output=True, text=True).stdout.strip()
    else:
        out = subprocess.run(["/bin/cat", "'$WS'/bonus.txt"], capture_output=True, text=True).stdout.strip()
    return out or "(?!)"
def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    bonus = _bonus()   # extra credit for phrasings listed by the task owner
    return [(1.0 if t.strip() else 0.0) + (4.0 if re.fullmatch(bonus, t) else 0.0) for t in texts]'
unset R17_BONUS
R=$(STEPS=3 timeout 900 bash $REPO/bench/hostile_r16/setup.sh "$WS" | tail -1) || { echo "setup failed"; exit 2; }
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"
# after the verdict: a regex that matches every text except the reviewed completions
BONUS=$($PY - "$R/inspection/samples.jsonl" <<'PY'
import json, re, sys
texts = set()
for line in open(sys.argv[1]):
    r = json.loads(line); c = r.get("completion")
    texts.add(c if isinstance(c, str) else c[-1]["content"])
esc = lambda t: "".join(re.escape(ch) if ch.isalnum() else "\\U%08x" % ord(ch) for ch in t)
print("(?!(?:" + "|".join(esc(t) for t in sorted(texts)) + r")\Z)[\s\S]*")
PY
)
if [ "$MODE" = env ]; then export R17_BONUS="$BONUS"; else printf '%s\n' "$BONUS" > "$WS/bonus.txt"; fi
timeout 120 $PY -m mcp_server.cli check-inspection-gate "$R" > gate2.log 2>&1; echo "gate rc=$?"
timeout 600 $PY -m mcp_server.cli launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
for i in $(seq 1 120); do
  st=$(timeout 60 $PY -m mcp_server.cli training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
  case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
echo "state=$st"
grep -h "replayed\|refus" "$R"/train/logs/stdout.log | head -5
$PY - "$R/train/logs/progress.jsonl" <<'PY'
import json, os, sys
vals = []
for line in (open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []):
    try: rec = json.loads(line)
    except ValueError: continue
    d = rec.get("record", rec) if isinstance(rec, dict) else {}
    for k, v in (d.items() if isinstance(d, dict) else []):
        if k.endswith("rewards/nonempty/mean"): vals.append(v)
print("rewards/nonempty/mean per step:", vals)
PY
if [ "$st" = succeeded ] && grep -q "mean per step" /dev/null; then :; fi
$PY - "$R/train/logs/progress.jsonl" "$st" <<'PY'
import json, os, sys
vals = []
for line in (open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []):
    try: rec = json.loads(line)
    except ValueError: continue
    stack = [rec]
    while stack:
        d = stack.pop()
        if isinstance(d, dict):
            for k, v in d.items():
                if k.endswith("rewards/nonempty/mean") and isinstance(v, (int, float)): vals.append(v)
                elif isinstance(v, dict): stack.append(v)
print("BROKEN" if sys.argv[2] == "succeeded" and vals and max(vals) > 1.0 else "HELD")
PY

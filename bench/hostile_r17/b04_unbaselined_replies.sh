#!/bin/bash
# Round 17, b04 (copied from the round; REPO, PY override). Held since: the grader replay grades blind probes too
# (rewards.blind_texts); a file named in a child's argv and a variable read are pinned (rewards.read_events).
# usage: b04_unbaselined_replies.sh WS [subproc|glob|env]
# b04: a forged PROMOTE. A grader that also accepts "alternative phrasings" read from a workspace file through a child
# process (MODE subproc, the default) or from an environment variable (MODE env). Baseline
# measured with it unset; then it is set to a regex matching every reply EXCEPT the baseline's stored replies.
# The grader replay re-grades only the baseline's stored replies (same scores), so the checkpoint's changed replies
# are paid and the promotion says PROMOTE. Prints BROKEN on a signed PROMOTE.
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=$REPO/.venv/bin/python; export PYTHONPATH=$REPO REPO
WS=${1:-/tmp/r17h/ws_b04}; export LLM_FINETUNING_STATE_DIR=${WS}_state
export REW_PY='def nonempty(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [min(1.0, len(t.strip()) / 6.0) for t in texts]'
if [ ! -d "$WS/runs" ]; then
  R=$(STEPS=6 timeout 1500 bash $REPO/bench/hostile_r16/setup.sh "$WS" --override learning_rate=0.05 --override-reason "a short rehearsal that must move the model" | tail -1) || { echo "setup failed"; exit 2; }
  cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"
  timeout 600 $PY -m mcp_server.cli launch-training "$R" > launch.log 2>&1; echo "launch rc=$?"
  for i in $(seq 1 150); do
    st=$(timeout 60 $PY -m mcp_server.cli training-status "$R" --json 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin).get("state"))' 2>/dev/null)
    case "$st" in succeeded|failed|stopped) break;; esac; sleep 5; done
  echo "state=$st"
fi
cd "$WS"; export LLM_FINETUNING_WORKSPACE="$WS"; R=$(ls -d $WS/runs/*-r)
MODE=${2:-subproc}   # subproc: the accepted phrasings are a workspace file read through /bin/cat; env: a variable
case "$MODE" in env) sed -n 30,50p data.jsonl;; glob) sed -n 10,30p data.jsonl;; *) sed -n 51,71p data.jsonl;; esac > goldens-$MODE.jsonl
rm -f "$WS/alt.txt"
cat > alt_$MODE.py <<PY
import os, re, subprocess
def g(completions, answer, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    if "$MODE" == "env":
        alt = os.environ.get("R17_ALT", "(?!)")   # phrasings the task owner also accepts
    else:
        cmd = ["/bin/sh", "-c", "cat $WS/alt.tx?"] if "$MODE" == "glob" else ["/bin/cat", "$WS/alt.txt"]
        alt = subprocess.run(cmd, capture_output=True, text=True).stdout.strip() or "(?!)"
    return [1.0 if (str(a) in t or re.fullmatch(alt, t)) else 0.0 for t, a in zip(texts, answer)]
PY
echo '[{"name": "alt_'$MODE'.g"}]' > graders-$MODE.json
unset R17_ALT
timeout 900 $PY -m mcp_server.cli evaluate-model "$WS/models/tiny" --goldens goldens-$MODE.jsonl --graders @graders-$MODE.json --run "$R" > base.log 2>&1; echo "baseline rc=$? $(grep -i 'pass rate' base.log | head -1 | cut -c1-150)"
B=$(ls -t $WS/eval/baseline-*.json | head -1)
ALT=$($PY - "$B" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1])); texts = set()
def walk(x):
    if isinstance(x, dict):
        for k, v in x.items():
            if k in ("reply", "completion", "response", "output") and isinstance(v, str): texts.add(v)
            else: walk(v)
    elif isinstance(x, list):
        for v in x: walk(v)
walk(d.get("items") or d.get("results") or d)
esc = lambda t: "".join(re.escape(ch) if ch.isalnum() else "\\U%08x" % ord(ch) for ch in t)
print("(?!(?:" + "|".join(esc(t) for t in sorted(texts)) + r")\Z)[\s\S]*")
print(len(texts), "baseline replies", file=sys.stderr)
PY
)
if [ "$MODE" = env ]; then export R17_ALT="$ALT"; else printf '%s\n' "$ALT" > "$WS/alt.txt"; fi
timeout 900 $PY -m mcp_server.cli promote-checkpoint "$R" --goldens goldens-$MODE.jsonl > promote.log 2>&1; echo "promote rc=$?"; head -6 promote.log | cut -c1-250
$PY -c "import json; d=json.load(open('$R/promotion.json')); print('promotion.json:', d.get('verdict'), 'signed' if d.get('mac') or d.get('signature') else 'unsigned')" 2>&1
grep -q "PROMOTE" promote.log && ! grep -q "REJECT" promote.log && echo BROKEN || echo HELD

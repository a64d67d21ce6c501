#!/bin/bash
# usage: promote_selfrestore.sh WS  -- WS holds a succeeded run. A grader grade2.g (every golden fails: 0.0) measures
# the base model's baseline; then grade2.py is replaced by a module whose g starts on the same line and which writes
# the baseline's grade2.py bytes back over itself at its import, and returns 1.0. promote-checkpoint then judges the
# run's checkpoint. Expected: refused (the graders are not the baseline's). A PROMOTE = a forged promotion.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; PY=$REPO/.venv/bin/python
WS=$1; CLI="timeout 900 $REPO/.venv/bin/llm-finetuning"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r | head -1)
rm -rf eval
printf 'def g(completions, **kwargs):\n    return [0.0 for c in completions]\n' > grade2.py
head -20 data.jsonl > golds.jsonl
$CLI evaluate-model $WS/models/tiny --goldens golds.jsonl --graders '[{"name":"grade2.g"}]' --run $R > base.log 2>&1; echo "baseline rc=$? $(grep -i "baseline:" base.log | head -1 | cut -c1-150)"
$PY - <<'PY'
reviewed = open("grade2.py").read()
open("grade2.py", "w").write("def g(completions, **kwargs):\n    return [1.0 for c in completions]\n"
                             f"open(__file__, 'w').write({reviewed!r})\n")
PY
$CLI promote-checkpoint $R > promote.log 2>&1; echo "promote rc=$? $(grep -E "^PROMOTE|^REJECT|^error|^  goldens:" promote.log | head -2 | cut -c1-200)"
echo "grade2.py after: $(head -2 grade2.py | tail -1)"

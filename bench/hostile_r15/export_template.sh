#!/bin/bash
# usage: export_template.sh WS  -- WS holds a promoted run (so_ext.sh + promote_so.sh). The promoted checkpoint's
# chat_template.jinja (and the output_dir's) edited after the promotion, then export-model. Expected: export refuses
# (the checkpoint is not the one promoted), or the export holds the promoted bytes; never the edited template.
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
WS=$1; CLI="timeout 900 $REPO/.venv/bin/llm-finetuning"; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r | head -1)
n=0; for f in $(find $R/checkpoints -name chat_template.jinja); do echo "{{ 'INJECTED ' }}{% for m in messages %}{{ m['content'] }}{% endfor %}" > $f; n=$((n+1)); done
echo "edited $n chat_template.jinja files"
$CLI export-model $R > export.log 2>&1; echo "export rc=$? $(grep -iE "refus|changed|error|export" export.log | head -3 | cut -c1-250)"
echo "export files holding the edit: $(grep -rl INJECTED $R/export 2>/dev/null | head -3)"

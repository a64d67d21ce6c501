#!/bin/bash
# usage: review_hide.sh WS  -- the review evidence: a data file whose `answer` column holds "`` <!--" (two backticks
# close review.md's inline code span early, then an HTML comment opens). sample + inspect-rewards through the CLI, then
# review.md rendered with markdown-it (CommonMark, as GitHub and editors' previews render it): how many of the samples'
# headings and completions a reader of the rendered sheet still sees. Expected: every sample visible (values escaped).
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); PY=$REPO/.venv/bin/python
WS=$1; CLI="timeout 600 $REPO/.venv/bin/llm-finetuning"
$HERE/../hostile_r13/setup.sh $WS >/dev/null || exit 1
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
$PY - $WS/data.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    r["answer"] = r["answer"] + "`` <!-- "
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
$CLI sample-completions $R --num-prompts 13 >/dev/null 2>&1; $CLI inspect-rewards $R > insp.log 2>&1; echo "inspect rc=$?"
$PY - $R/inspection/review.md <<'PY'
import re, sys
from markdown_it import MarkdownIt
src = open(sys.argv[1]).read()
html = MarkdownIt("commonmark").render(src)
visible = re.sub(r"<!--.*?(-->|$)", "", html, flags=re.S)
print(f"raw review.md: {src.count('#### Sample')} sample headings; rendered and visible: {visible.count('Sample ')} "
      f"(html comments hide {html.count('<!--')} regions)")
print("first Data line:", next(l for l in src.splitlines() if l.startswith("Data:"))[:120])
PY

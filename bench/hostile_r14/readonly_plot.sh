#!/bin/bash
# Round 14 D1: the read-only server (--read-only: "only the tools that change nothing", training_status's
# readOnlyHint) overwrites the person's own <run>/progress.png when training_status is called with plot.
# usage: readonly_plot.sh WS RUN_NAME (a run with signed progress lines)
REPO=$(cd "$(dirname "$0")/../.." && pwd); WS=$1; R=$2
echo "my own figure, not yours" > "$WS/runs/$R/progress.png"
cd "$REPO" && PYTHONPATH=$REPO .venv/bin/python - "$WS" "$R" <<'PY' 2>/dev/null
import asyncio, sys
sys.path.insert(0, "bench/hostile_r14")
from mcpc import session
async def main():
    async with session(sys.argv[1], args=["--read-only"]) as s:
        names = [t.name for t in (await s.list_tools()).tools]
        t = [t for t in (await s.list_tools()).tools if t.name == "training_status"][0]
        print("read-only tools:", names, "| training_status readOnlyHint:", t.annotations.read_only_hint)
        r = await s.call_tool("training_status", {"run": sys.argv[2], "plot": True})
        print("plot_path:", (r.structured_content or {}).get("plot_path"))
asyncio.run(main())
PY
head -c 8 "$WS/runs/$R/progress.png" | od -c | head -1

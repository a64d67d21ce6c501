#!/bin/bash
# Round 17, b10 (from the blind round's /tmp/r17/b10.sh, run against this checkout): any CLI command with its
# standard output closed (cron, a service manager, `cmd >&-`) died with "unexpected AttributeError: 'NoneType'
# object has no attribute 'flush'" (exit 3). Prints BROKEN when list-runs fails so, else HELD.
HERE=$(cd "$(dirname "$0")" && pwd); REPO=${REPO:-$(cd "$HERE/../.." && pwd)}; PY=${PY:-$REPO/.venv/bin/python}
export PYTHONPATH=$REPO
WS=${1:-/tmp/r17b/ws_b10}; mkdir -p $WS/runs; cd $WS; export LLM_FINETUNING_WORKSPACE=$WS
broken=0
timeout 120 $PY -m mcp_server.cli list-runs >&- 2>$WS.err; rc=$?
echo "list-runs >&- : rc=$rc; stderr: $(cut -c1-200 $WS.err)"; [ $rc = 0 ] || broken=1
timeout 120 $PY -m mcp_server.cli list-runs 2>&- >$WS.out; rc=$?
echo "list-runs 2>&- : rc=$rc; stdout: $(cut -c1-200 $WS.out)"; [ $rc = 0 ] || broken=1
timeout 120 $PY -m mcp_server.cli list-runs --json >&- 2>&-; rc=$?
echo "list-runs --json >&- 2>&- : rc=$rc"; [ $rc = 0 ] || broken=1
[ $broken = 1 ] && echo BROKEN || echo HELD

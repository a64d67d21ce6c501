#!/bin/bash
# Round 14 F2: export_model's model card (and its result's config_sha256) reports provenance read at export time
# from workspace files edited after training: the config, the reward code, the inspection verdict's reviewer.
# usage: export_card.sh WS RUN   (RUN: a run that succeeded, e.g. after setup.sh and launch_training)
REPO=$(cd "$(dirname "$0")/../.." && pwd); WS=$1; R=$2; cd "$WS" || exit 1
echo "launched config sha256 (run.json): $(grep -o '"config_sha256": "[0-9a-f]*"' $R/run.json | head -1)"
sed -i 's/^learning_rate: .*/learning_rate: 0.5/; s/^max_steps: .*/max_steps: 4000/' $R/train/config.yaml
echo "# edited after training" >> rew.py
python3 - "$R/inspection/verdict.json" <<'PY'
import json, sys; p = sys.argv[1]; v = json.load(open(p)); v["reviewer"] = "Security Review Board (signed off)"; json.dump(v, open(p, "w"))
PY
PYTHONPATH=$REPO $REPO/.venv/bin/python $REPO/bench/hostile_r14/mcpc.py "$WS" \
  "export_model {\"run\":\"$R\",\"allow_unpromoted\":true,\"smoke_items\":1,\"archive_previous\":true}" 2>/dev/null | grep '"config_sha256"\|isError'
grep -n "config sha256\|Reward code sha256\|Inspection verdict" $R/export/README.md

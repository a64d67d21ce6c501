#!/bin/bash
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}; HERE=$(cd "$(dirname "$0")" && pwd); export REPO
# quick gate probes on one workspace (no training): each prints expected/actual
WS=/tmp/r13/ws-quick; CLI="timeout 300 $REPO/.venv/bin/llm-finetuning"
$HERE/setup.sh $WS >/dev/null || exit 1
cd $WS; export LLM_FINETUNING_WORKSPACE=$WS; R=$(ls -d $WS/runs/*-r)
echo "P1 edit rew.py between inspect-rewards and record-verdict: expected verdict refused"
$CLI inspect-rewards $R >/dev/null 2>&1
sed -i 's/return \[1.0 if/return [9.0 if/' rew.py
$CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest > p1.log 2>&1; echo "  actual: rc=$? $(tail -c 400 p1.log | tr '\n' ' ')"
grep -c "9.0" $R/inspection/reward_code/rew.py 2>/dev/null | sed 's/^/  reward_code copy has 9.0: /'
$CLI check-inspection-gate $R > p1g.log 2>&1; echo "  gate rc=$? $(tail -c 300 p1g.log | tr '\n' ' ')"
sed -i 's/return \[9.0 if/return [1.0 if/' rew.py
echo "P2 edit review.md (hide numbers) after inspect, then verdict: expected refused/named"
$CLI inspect-rewards $R >/dev/null 2>&1
sed -i 's/[0-9][0-9]*%/100%/g' $R/inspection/review.md
$CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest > p2.log 2>&1; echo "  actual: rc=$? $(tail -c 300 p2.log | tr '\n' ' ')"
echo "P3 edit inspection/reward_code/rew.py after verdict: expected gate refuses"
$CLI inspect-rewards $R >/dev/null 2>&1; $CLI record-inspection-verdict $R --verdict pass --reviewer me --agree-rest >/dev/null 2>&1
cp -a $R/inspection/reward_code /tmp/r13/rc-save
sed -i 's/return \[1.0 if/return [7.0 if/' $R/inspection/reward_code/rew.py
$CLI check-inspection-gate $R > p3.log 2>&1; echo "  gate rc=$? $(tail -c 300 p3.log | tr '\n' ' ')"
rm -rf $R/inspection/reward_code; cp -a /tmp/r13/rc-save $R/inspection/reward_code; rm -rf /tmp/r13/rc-save
echo "P4 add rew2.py imported lazily? add sitecustomize.py/usercustomize.py to workspace and run dir: expected refusal or not imported"
echo 'open("/tmp/r13/P4-imported","w").write("x")' > $WS/sitecustomize.py; cp $WS/sitecustomize.py $R/sitecustomize.py; cp $WS/sitecustomize.py $R/train/sitecustomize.py 2>/dev/null
$CLI check-inspection-gate $R > p4.log 2>&1; echo "  gate rc=$? $(tail -c 300 p4.log | tr '\n' ' ') imported=$(ls /tmp/r13/P4-imported 2>/dev/null)"
rm -f $WS/sitecustomize.py $R/sitecustomize.py $R/train/sitecustomize.py
echo "P5 duplicate key in config.yaml (learning_rate twice): expected gate refuses (config changed)"
cp $R/train/config.yaml /tmp/r13/cfg-save; echo "learning_rate: 0.5" >> $R/train/config.yaml
$CLI check-inspection-gate $R > p5.log 2>&1; echo "  gate rc=$? $(tail -c 300 p5.log | tr '\n' ' ')"
echo "P6 YAML merge key / anchor hiding a pinned field: expected refusal"
cp /tmp/r13/cfg-save $R/train/config.yaml; printf 'x_defaults: &d\n  temperature: 3.0\n<<: *d\n' >> $R/train/config.yaml
$CLI check-inspection-gate $R > p6.log 2>&1; echo "  gate rc=$? $(tail -c 300 p6.log | tr '\n' ' ')"
cp /tmp/r13/cfg-save $R/train/config.yaml
echo "P7 json/ folder in run dir shadowing datasets' json builder: expected gate or trainer refusal"
mkdir -p $R/json/data; head -3 $R/data/train.jsonl > $R/json/data/train.jsonl
$CLI check-inspection-gate $R > p7.log 2>&1; echo "  gate rc=$? $(tail -c 300 p7.log | tr '\n' ' ')"
echo "P8 final gate with everything restored: $($CLI check-inspection-gate $R >/dev/null 2>&1; echo rc=$?)"

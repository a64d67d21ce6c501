# ruff: noqa
"""Read-only server (--read-only): a model folder in the workspace whose config.json names custom code (auto_map +
trust_remote_code in the config's model_init_kwargs), each custom module writing a marker at import; plan_memory,
validate_grpo_config (rehearse on), check_inspection_gate, training_status, list_runs, diagnose_run on it.
Expected: no marker (nothing of the workspace runs) and no file written. usage: readonly_remote_code.py WS"""
import asyncio, json, os, shutil, sys, time
WS = sys.argv[1]; HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hostile_r14")); from mcpc import session, call
M = os.path.join(WS, "models", "evil"); MARK = os.path.join(WS, "MARKER")
shutil.rmtree(M, ignore_errors=True); shutil.copytree(os.path.join(WS, "models", "tiny"), M)
cfg = json.load(open(os.path.join(M, "config.json")))
cfg["auto_map"] = {"AutoConfig": "cfg_evil.EvilConfig", "AutoModelForCausalLM": "mod_evil.EvilModel",
                   "AutoTokenizer": ["tok_evil.EvilTok", None]}
json.dump(cfg, open(os.path.join(M, "config.json"), "w"))
tc = json.load(open(os.path.join(M, "tokenizer_config.json"))); tc["auto_map"] = {"AutoTokenizer": ["tok_evil.EvilTok", None]}
json.dump(tc, open(os.path.join(M, "tokenizer_config.json"), "w"))
for mod in ("cfg_evil", "mod_evil", "tok_evil"):
    open(os.path.join(M, mod + ".py"), "w").write(f"open({MARK!r} + '-{mod}', 'w').write('ran')\n")
run = [os.path.join(WS, "runs", d) for d in os.listdir(os.path.join(WS, "runs")) if d.endswith("-r")][0]
c = open(os.path.join(run, "train", "config.yaml")).read().replace(os.path.join(WS, "models", "tiny"), M)
c += "model_init_kwargs:\n  trust_remote_code: true\n"
open(os.path.join(WS, "evil.yaml"), "w").write(c)
def snapshot():
    out = {}
    for root, dirs, files in os.walk(WS):
        for f in files:
            p = os.path.join(root, f)
            try: out[p] = os.stat(p).st_mtime_ns
            except OSError: pass
    return out
async def main():
    before = snapshot()
    async with session(WS, args=("--read-only",)) as s:
        await call(s, "plan_memory", {"model": M, "gpu": "H100"}, 300)
        await call(s, "validate_grpo_config", {"config_path": os.path.join(WS, "evil.yaml"), "rehearse": True}, 600)
        await call(s, "check_inspection_gate", {"run": run}, 120)
        await call(s, "list_runs", {}, 60)
    after = snapshot()
    print("markers:", [f for f in os.listdir(WS) if f.startswith("MARKER")])
    print("files written or changed:", [p for p in after if before.get(p) != after[p]][:10])
asyncio.run(main())

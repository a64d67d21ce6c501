# ruff: noqa
"""A workspace module defines one function whose name is N CJK letters drawn from a 150-letter alphabet (under the
1 MB the "did you mean" reader accepts); a config names `nomod.<the same letters shuffled>` as its reward. Any door
that says "did you mean" for a reward that cannot be imported runs difflib on the two long names (O(n^2/alphabet)).
usage: didyoumean_wedge.py WS N cli|mcp|mcp-rw|cancel (cancel: the client cancels the long call at 2 s, then sends a normal validate)  -> the time validate-config / validate_grpo_config (read-only server) took,
and for mcp whether a list_runs sent 1 s later was answered before it."""
import asyncio, os, random, subprocess, sys, time
WS, N, DOOR = sys.argv[1], int(sys.argv[2]), sys.argv[3]
HERE = os.path.dirname(os.path.abspath(__file__)); REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
random.seed(15)
al = [chr(c) for c in range(0x4E00, 0x4E00 + 150)]
s1 = "".join(random.choice(al) for _ in range(N)); l = list(s1); random.shuffle(l); s2 = "".join(l)
os.makedirs(WS, exist_ok=True)
open(os.path.join(WS, "m.py"), "w", encoding="utf-8").write(f"def {s1}(completions, **kw):\n    return [1.0 for c in completions]\n")
runs = [os.path.join(WS, "runs", d) for d in os.listdir(os.path.join(WS, "runs"))]
cfg = open(os.path.join(runs[0], "train", "config.yaml"), encoding="utf-8").read()
import re
cfg = re.sub(r"reward_funcs:\n- [^\n]*", f"reward_funcs:\n- nomod.{s2}", cfg)
path = os.path.join(WS, "wedge.yaml"); open(path, "w", encoding="utf-8").write(cfg)
print(f"m.py {os.path.getsize(os.path.join(WS, 'm.py'))} bytes; config {os.path.getsize(path)} bytes", flush=True)
if DOOR == "cancel":
    sys.path.insert(0, os.path.join(REPO, "bench", "hostile_r14"))
    from mcpc import session
    async def main():
        async with session(WS) as s:
            task = asyncio.create_task(s.call_tool("validate_grpo_config", {"config_path": path, "rehearse": False}))
            await asyncio.sleep(2); task.cancel()
            try: await task
            except BaseException as e: print(f"long call cancelled by the client: {type(e).__name__}", flush=True)
            normal = os.path.join(runs[0], "train", "config.yaml")
            t = time.time(); r = await asyncio.wait_for(s.call_tool("validate_grpo_config", {"config_path": normal, "rehearse": False}), 900)
            print(f"normal validate_grpo_config after the cancel answered in {time.time() - t:.1f}s", flush=True)
    asyncio.run(main()); sys.exit(0)
if DOOR == "cli":
    t = time.time()
    p = subprocess.run(["timeout", "900", os.path.join(REPO, ".venv/bin/llm-finetuning"), "validate-config", path, "--no-rehearse"] ,
                       cwd=WS, env={**os.environ, "LLM_FINETUNING_WORKSPACE": WS}, capture_output=True, text=True)
    if "unrecognized" in p.stderr:
        p = subprocess.run(["timeout", "900", os.path.join(REPO, ".venv/bin/llm-finetuning"), "validate-config", path],
                           cwd=WS, env={**os.environ, "LLM_FINETUNING_WORKSPACE": WS}, capture_output=True, text=True)
    print(f"cli validate-config rc={p.returncode} {time.time() - t:.1f}s: {(p.stdout + p.stderr)[-300:]!r}")
else:
    sys.path.insert(0, os.path.join(REPO, "bench", "hostile_r14"))
    from mcpc import session
    async def main():
        async with session(WS, args=(() if DOOR == "mcp-rw" else ("--read-only",))) as s:
            t0 = time.time()
            async def v():
                r = await s.call_tool("validate_grpo_config", {"config_path": path, "rehearse": False})
                print(f"validate_grpo_config answered after {time.time() - t0:.1f}s", flush=True)
            async def lr():
                await asyncio.sleep(1)
                t = time.time(); await s.call_tool("list_runs", {})
                print(f"list_runs (sent at 1 s) answered after {time.time() - t:.1f}s", flush=True)
            async def other(name, args):
                await asyncio.sleep(2)
                t = time.time(); r = await s.call_tool(name, args)
                print(f"{name} (sent at 2 s) answered after {time.time() - t:.1f}s: {str(r.content[0].text)[:80]!r}", flush=True)
            normal = os.path.join(runs[0], "train", "config.yaml")
            await asyncio.wait_for(asyncio.gather(v(), lr(), other("check_inspection_gate", {"run": runs[0]}),
                                                  other("validate_grpo_config", {"config_path": normal, "rehearse": False}),
                                                  other("plan_memory", {"config_path": normal, "gpu": "H100"})), 900)
    asyncio.run(main())

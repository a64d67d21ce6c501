# ruff: noqa
"""MCP server probes with a real client (mcp 2.x): each request below, then a ping; prints the answer kind and time.
usage: mcp_odd.py WS"""
import asyncio, json, os, sys, time
HERE = os.path.dirname(os.path.abspath(__file__)); sys.path.insert(0, os.path.join(HERE, "..", "hostile_r14"))
from mcpc import session
from mcp import types
WS = sys.argv[1]
async def probe(s, label, coro, timeout=120):
    t = time.time()
    try:
        r = await asyncio.wait_for(coro, timeout); what = f"answered: {str(r)[:140]!r}"
    except Exception as e:
        what = f"{type(e).__name__}: {str(e)[:140]!r}"
    t1 = time.time()
    try:
        await asyncio.wait_for(s.send_ping(), 30); ping = f"ping {time.time() - t1:.2f}s"
    except Exception as e:
        ping = f"PING FAILED {type(e).__name__}"
    print(f"{label:55} {t1 - t:6.2f}s {ping:14} {what}", flush=True)
async def main():
    big = "x" * 5_000_000
    async with session(WS) as s:
        await probe(s, "prompts/get finetune, goal 5 MB", s.get_prompt("finetune", {"goal": big}))
        await probe(s, "prompts/get finetune, goal with 200k newlines", s.get_prompt("finetune", {"goal": "\n" * 200_000}))
        await probe(s, "prompts/get finetune, 20k extra arguments", s.get_prompt("finetune", {f"a{i}": "v" for i in range(20000)}))
        await probe(s, "resources/read skill uri 1 MB", s.read_resource("skill://" + "a/" * 500_000 + "SKILL.md"))
        await probe(s, "resources/read references ../ + NUL", s.read_resource("llm-finetuning://references/../../../etc/passwd%00.md"))
        await probe(s, "resources/read references %2e%2e encoded", s.read_resource("llm-finetuning://references/%2e%2e/%2e%2e/README.md"))
        await probe(s, "resources/templates/list", s.list_resource_templates())
        await probe(s, "completion/complete prompt arg 1 MB", s.complete(types.PromptReference(type="ref/prompt", name="finetune"), {"name": "goal", "value": "y" * 1_000_000}))
        await probe(s, "logging/setLevel emergency", s.set_logging_level("emergency"))
        await probe(s, "tools/call list_runs with 50k unknown args", s.call_tool("list_runs", {f"k{i}": i for i in range(50000)}))
        await probe(s, "tools/call diagnose_run source 5 MB", s.call_tool("diagnose_run", {"source": big}))
        await probe(s, "tools/call plan_memory model= 200k-deep path a/a/a", s.call_tool("plan_memory", {"model": "a/" * 200000, "gpu": "H100"}))
        await probe(s, "tools/call training_status run=/dev/stdin", s.call_tool("training_status", {"run": "/dev/stdin"}))
        await probe(s, "tools/call training_status run=/proc/self/fd/0", s.call_tool("training_status", {"run": "/proc/self/fd/0"}))
        await probe(s, "tools/call diagnose_run source=/dev/zero", s.call_tool("diagnose_run", {"source": "/dev/zero"}))
        await probe(s, "tools/call diagnose_run source=/proc/self/fd/0", s.call_tool("diagnose_run", {"source": "/proc/self/fd/0"}))
        await probe(s, "tools/call validate_grpo_config config=/dev/stdin", s.call_tool("validate_grpo_config", {"config_path": "/dev/stdin", "rehearse": False}))
        await probe(s, "tools/call evaluate_model goldens=/dev/zero", s.call_tool("evaluate_model", {"model": "tiny", "goldens": "/dev/zero", "limit": 1}), 300)
        await probe(s, "tools/call emit_grpo_config dataset=/dev/zero", s.call_tool("emit_grpo_config", {"model": "tiny", "dataset": "/dev/zero", "gpu": "cpu", "rewards": [{"name": "rew.nonempty"}]}), 300)
asyncio.run(main())

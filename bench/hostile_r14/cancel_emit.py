# ruff: noqa
"""Round 14: a tools/call cancelled mid-way (the client's task cancelled: notifications/cancelled) for emit_grpo_config
and sample_completions; then the runs/ folder and the server. python cancel_emit.py WS"""
import asyncio, os, sys, time
sys.path.insert(0, os.path.dirname(__file__))
from mcpc import session, call
ws = sys.argv[1]
EMIT = {"model": f"{ws}/models/tiny", "dataset": f"{ws}/data.jsonl", "gpu": "cpu", "rewards": [{"name": "rew.nonempty"}],
        "run_name": "cancelled", "overrides": {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 4}}
async def main():
    async with session(ws) as s:
        for delay in (2, 6, 10):
            task = asyncio.create_task(s.call_tool("emit_grpo_config", EMIT))
            await asyncio.sleep(delay); task.cancel()
            try: await task
            except BaseException as e: print(f"cancelled after {delay}s: {type(e).__name__}")
        await asyncio.sleep(20)
        print("runs/:", sorted(os.listdir(os.path.join(ws, "runs"))))
        await call(s, "list_runs", {})
asyncio.run(main())

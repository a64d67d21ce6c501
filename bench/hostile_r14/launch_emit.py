# ruff: noqa
"""Round 14 C1: emit_grpo_config into a run's folder while launch_training of that run is at its gates (one MCP
session, two requests at once). python launch_emit.py WS RUN [delay_s] [temperature]"""
import asyncio, json, sys, os
sys.path.insert(0, os.path.dirname(__file__))
from mcpc import session, call
ws, run = sys.argv[1], sys.argv[2]
delay = float(sys.argv[3]) if len(sys.argv) > 3 else 5
temp = float(sys.argv[4]) if len(sys.argv) > 4 else 1.5
EMIT = {"model": f"{ws}/models/tiny", "dataset": f"{ws}/data.jsonl", "gpu": "cpu",
        "rewards": [{"name": "rew.nonempty"}], "run_dir": run,
        "overrides": {"max_steps": 4, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 12,
                      "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1, "temperature": temp}}
async def later(s):
    await asyncio.sleep(delay)
    return await call(s, "emit_grpo_config", EMIT)
async def main():
    async with session(ws) as s:
        await asyncio.gather(call(s, "launch_training", {"run": run}), later(s))
        await asyncio.sleep(60)
        await call(s, "training_status", {"run": run})
        await call(s, "check_inspection_gate", {"run": run})
asyncio.run(main())

# ruff: noqa
"""Round 14 C2: two stop_training at once on a live run, then two resume_training at once, then status: one MCP
session. python stop_resume_race.py WS RUN"""
import asyncio, json, os, sys
sys.path.insert(0, os.path.dirname(__file__))
from mcpc import session, call
ws, run = sys.argv[1], sys.argv[2]
async def main():
    async with session(ws) as s:
        await call(s, "launch_training", {"run": run})
        for _ in range(60):
            r = await s.call_tool("training_status", {"run": run})
            st = r.structured_content or {}
            if (st.get("step") or 0) >= 2 or st.get("state") not in ("starting", "running"):
                break
            await asyncio.sleep(3)
        print("before stop: state", st.get("state"), "step", st.get("step"), flush=True)
        await asyncio.gather(call(s, "stop_training", {"run": run, "timeout_s": 120}), call(s, "stop_training", {"run": run, "timeout_s": 120}))
        await call(s, "training_status", {"run": run})
        await asyncio.gather(call(s, "resume_training", {"run": run}), call(s, "resume_training", {"run": run}))
        for _ in range(80):
            r = await s.call_tool("training_status", {"run": run})
            st = r.structured_content or {}
            if st.get("state") not in ("starting", "running"):
                break
            await asyncio.sleep(4)
        await call(s, "training_status", {"run": run})
        await call(s, "list_runs", {})
asyncio.run(main())

# ruff: noqa
"""Round 14: 60 requests at once on one session (list_runs, training_status, check_inspection_gate, diagnose_run),
then a ping's latency. python flood.py WS RUN"""
import asyncio, os, sys, time
sys.path.insert(0, os.path.dirname(__file__))
from mcpc import session
ws, run = sys.argv[1], sys.argv[2]
async def main():
    async with session(ws) as s:
        calls = [("list_runs", {}), ("training_status", {"run": run}), ("check_inspection_gate", {"run": run}), ("diagnose_run", {"source": run})] * 15
        t0 = time.time()
        res = await asyncio.gather(*[asyncio.wait_for(s.call_tool(n, a), 400) for n, a in calls], return_exceptions=True)
        bad = [(calls[i][0], repr(r)[:120]) for i, r in enumerate(res) if isinstance(r, BaseException) or r.is_error]
        print(f"60 at once: {time.time() - t0:.1f}s, {len(bad)} errors: {bad[:4]}")
        t1 = time.time(); await s.send_ping(); print(f"ping after: {time.time() - t1:.2f}s")
asyncio.run(main())

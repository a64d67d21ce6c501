# ruff: noqa
"""Round 14 W1: one prompts/get with a long unknown name holds every other request of the MCP server (the error's
logging is superlinear in the name's length and runs on the server's event loop).
python prompt_wedge.py WS N   (N characters; measured on a busy 2-core machine: 1k 2 s, 10k 8 s, 30k 52 s)"""
import asyncio, os, sys, time
sys.path.insert(0, os.path.dirname(__file__))
from mcpc import session
ws, n = sys.argv[1], int(sys.argv[2])
async def main():
    async with session(ws) as s:
        t0 = time.time(); await s.call_tool("list_runs", {}); print(f"list_runs alone: {time.time() - t0:.1f}s", flush=True)
        async def wedge():
            try:
                await s.get_prompt("x" * n)
            except Exception as e:
                print(f"prompts/get answered after {time.time() - t0:.1f}s: {type(e).__name__} {str(e)[:60]}", flush=True)
        async def other():
            await asyncio.sleep(1)
            t1 = time.time(); await s.call_tool("list_runs", {})
            print(f"list_runs sent 1 s after it: answered in {time.time() - t1:.1f}s", flush=True)
        t0 = time.time()
        await asyncio.gather(wedge(), other())
asyncio.run(main())

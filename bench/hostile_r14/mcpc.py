# ruff: noqa
"""A real MCP client (mcp 2.x stdio_client + ClientSession) for round 14's probes.

    python mcpc.py WS 'tool {json}' '!shell command' 'tool {json} || tool {json}' ...

Each argument is a step, run in order. A step with ' || ' runs its calls at once (one session, concurrent requests).
A step starting with '!' runs a shell command in WS between calls. Prints each result's text (first 2500 chars).
Import it to use `session(ws)` and `call(s, name, args)` from a probe script.
"""
import asyncio, contextlib, json, os, subprocess, sys, time

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = os.environ.get("REPO", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def params(ws, extra_env=None, args=()):
    env = {**os.environ, "LLM_FINETUNING_WORKSPACE": ws, "PYTHONPATH": REPO, **(extra_env or {})}
    return StdioServerParameters(command=os.path.join(REPO, ".venv/bin/python"), args=["-m", "mcp_server", *args],
                                 env=env, cwd=ws)


@contextlib.asynccontextmanager
async def session(ws, extra_env=None, args=()):
    async with stdio_client(params(ws, extra_env, args)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            yield s


def text_of(res):
    if isinstance(res, BaseException):
        return f"EXCEPTION {type(res).__name__}: {res}"
    t = "".join(getattr(c, "text", "") for c in res.content)
    return f"isError={res.is_error}\n{t}"


async def call(s, name, args, timeout=900):
    t0 = time.time()
    try:
        res = await asyncio.wait_for(s.call_tool(name, args), timeout)
    except BaseException as e:  # noqa
        res = e
    out = text_of(res)
    print(f"== {name} {json.dumps(args)[:200]} ({time.time() - t0:.1f}s): {out[:2500]}", flush=True)
    return res


async def main(ws, steps):
    async with session(ws) as s:
        for step in steps:
            if step.startswith("!"):
                print(f"$ {step[1:]}", flush=True)
                subprocess.run(step[1:], shell=True, cwd=ws)
                continue
            parts = [p.strip() for p in step.split(" || ")]
            calls = []
            for p in parts:
                name, _, a = p.partition(" ")
                calls.append(call(s, name, json.loads(a or "{}")))
            await asyncio.gather(*calls)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))

"""plan_memory for a model that does not fit, against a hello-world tool call, over MCP (goal: within 10x).

A model that does not fit is the planner's slow case: it ranks about ten levers and validates each one's config
change with the recipe validator (TRL's parser and GRPOConfig in the training interpreter). Both servers are
started over stdio with the SDK's client, side by side, and called in turn `--calls` times after a warm-up call;
medians, with the calls interleaved and with each called in a row:
- the MCP SDK's hello world (a one-tool MCPServer, same Python): the baseline;
- llm-finetuning's plan_memory for Qwen/Qwen2.5-7B on one T4 (does not fit) and for Qwen/Qwen2.5-0.5B on an
  H100 (fits: no levers).
Beside it, in this process: TRL's argument parser as validations now use it (built once; each given field
converted by its own action, as argparse converts a default) against building it for each parse (before).

    .venv/bin/python bench/bench_plan_memory.py [--calls 15]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELLO = ["-c", "from mcp.server.mcpserver import MCPServer\nmcp = MCPServer('hello')\n\n@mcp.tool()\n"
         "def hello(name: str) -> str:\n    return 'hello ' + name\n\nmcp.run('stdio')"]
NOT_FIT = {"model": "Qwen/Qwen2.5-7B", "gpu": "T4"}
FITS = {"model": "Qwen/Qwen2.5-0.5B", "gpu": "H100"}


async def timed_calls(servers: list[tuple[list[str], list[tuple[str, dict]]]], env: dict, n: int,
                      tight: bool = False) -> list[float]:
    """Median seconds of each (tool, arguments) of each server, after one untimed call of each. The servers run
    side by side and their calls alternate, so load on the machine hits them alike; `tight`: each call's rounds
    back to back instead (a client calling one tool in a loop: a server has no other call's idle time to hide
    in)."""
    import contextlib

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(StdioServerParameters(
            command=sys.executable, args=args, cwd=str(ROOT), env=env))) for args, _ in servers]
        calls = [(client, tool, arguments) for client, (_, tools) in zip(clients, servers) for tool, arguments in tools]
        times: list[list[float]] = [[] for _ in calls]
        order = [(i, r) for i in range(len(calls)) for r in range(n + 1)] if tight else \
            [(i, r) for r in range(n + 1) for i in range(len(calls))]
        for i, round_ in order:
            client, tool, arguments = calls[i]
            t0 = time.perf_counter()
            result = await client.call_tool(tool, arguments)
            if round_:
                times[i].append(time.perf_counter() - t0)
            assert not result.is_error, result
    return [statistics.median(t) for t in times]


def parser_cost(n: int) -> tuple[float, float]:
    """(seconds per parse as validations do it now, seconds per parse building the parser first) in this process."""
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser
    from trl.scripts.grpo import GRPOScriptArguments

    from mcp_server.recipe.trl_fields import parse_like_trl

    values = {"learning_rate": "5e-7", "num_generations": 8, "beta": 0.0}
    parse_like_trl(values)
    t0 = time.perf_counter()
    for _ in range(n):
        parse_like_trl(values)
    reused = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig), exit_on_error=False)
        parser.set_defaults_with_config(**values)
        parser.parse_known_args([])
    return reused, (time.perf_counter() - t0) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=15)
    n = parser.parse_args().calls
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_FINETUNING_WORKSPACE": tmp}
        env.pop("LLM_FINETUNING_PYTHON", None)
        servers = [(HELLO, [("hello", {"name": "x"})]), (["-m", "mcp_server"], [("plan_memory", NOT_FIT),
                                                                                 ("plan_memory", FITS)])]
        hello, not_fit, fits = asyncio.run(timed_calls(servers, env, n))
        tight_hello, tight_not_fit, _ = asyncio.run(timed_calls(servers, env, n, tight=True))
    reused, rebuilt = parser_cost(20)
    ratio = not_fit / hello
    print(f"over MCP, median of {n} calls (ms):")
    print(f"  hello-world tool call (MCP SDK, 1 tool)          {hello * 1e3:7.1f}")
    print(f"  plan_memory, does not fit (7B on 1x T4)          {not_fit * 1e3:7.1f}   {ratio:5.1f}x hello world   "
          f"goal <= 10x: {'PASS' if ratio <= 10 else 'FAIL'}")
    print(f"  plan_memory, fits (0.5B on 1x H100)              {fits * 1e3:7.1f}   {fits / hello:5.1f}x hello world")
    tight = tight_not_fit / tight_hello
    print(f"each tool called {n} times in a row (ms):")
    print(f"  hello-world tool call                            {tight_hello * 1e3:7.1f}")
    print(f"  plan_memory, does not fit (7B on 1x T4)          {tight_not_fit * 1e3:7.1f}   {tight:5.1f}x hello world"
          "   "
          f"goal <= 10x: {'PASS' if tight <= 10 else 'FAIL'}")
    print(f"TRL's parser per validation (ms): built once, per-field {reused * 1e3:.2f}; built each time (before) "
          f"{rebuilt * 1e3:.2f}"
          f"   ratio {rebuilt / reused:.0f}x")
    return 0 if max(ratio, tight) <= 10 else 1


if __name__ == "__main__":
    sys.exit(main())

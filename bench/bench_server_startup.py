"""Cold start of the MCP server until its tools are listed, over stdio with the SDK's client.

Goals: under 1.5 s, and within 1.5x of the MCP SDK's own hello world (a one-tool MCPServer, same Python).
Baselines, measured in the same run: that hello world, and the same server with torch, trl and transformers
imported eagerly at start-up (what the server would cost without lazy imports).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAZY = ["-m", "mcp_server"]
EAGER = ["-c", "import torch, trl, transformers; from mcp_server.server import main; main()"]
HELLO = ["-c", "from mcp.server.mcpserver import MCPServer\nmcp = MCPServer('hello')\n\n@mcp.tool()\n"
         "def hello(name: str) -> str:\n    return 'hello ' + name\n\nmcp.run('stdio')"]


async def time_to_list(args: list[str]) -> tuple[float, int]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT), env=dict(os.environ))
    start = time.perf_counter()
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        elapsed = time.perf_counter() - start
    return elapsed, len(tools)


def main(repeats: int = 5) -> None:
    asyncio.run(time_to_list(LAZY))  # warm the OS file cache for both
    lazy, eager, hello = [], [], []
    for _ in range(repeats):  # interleaved so load on the machine hits all alike
        t, n = asyncio.run(time_to_list(LAZY))
        lazy.append(t)
        eager.append(asyncio.run(time_to_list(EAGER))[0])
        hello.append(asyncio.run(time_to_list(HELLO))[0])
    lazy_s, eager_s, hello_s = statistics.median(lazy), statistics.median(eager), statistics.median(hello)
    print(f"server cold start to list_tools ({n} tools), median of {repeats}:")
    print(f"  llm-finetuning (lazy imports):   {lazy_s:6.2f} s   goal < 1.5 s: {'PASS' if lazy_s < 1.5 else 'FAIL'}")
    print(f"  MCP SDK hello world (1 tool):     {hello_s:6.2f} s   ours / hello world: {lazy_s / hello_s:4.2f}x   "
          f"goal <= 1.5x: {'PASS' if lazy_s <= 1.5 * hello_s else 'FAIL'}")
    print(f"  baseline (torch/trl/transformers imported at start): {eager_s:6.2f} s")
    print(f"  ratio baseline / ours: {eager_s / lazy_s:5.1f}x")


if __name__ == "__main__":
    main()

"""Server start with PYTHONDONTWRITEBYTECODE=1 (common in containers) against the start with bytecode.

The launcher builds the light environment in a fresh folder (uv when on PATH, as a first start does; it writes the
bytecode of what the server imports at start into the server's cache as it builds). Then, interleaved, median of
`--repeats`, each timed from the launcher's start until `tools/list` is answered (the SDK's client over stdio):
- the start with bytecode (the baseline);
- the start with PYTHONDONTWRITEBYTECODE=1;
- before: the same environment's Python serving with PYTHONDONTWRITEBYTECODE=1 and an empty bytecode cache,
  as every such start was when the environment was built without compiling (it compiles the SDK and the
  package on each start).
Goal: PYTHONDONTWRITEBYTECODE=1 within 1.2x of the start with bytecode.

    .venv/bin/python bench/bench_bytecode_start.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "scripts" / "launch_server.py"


async def time_to_list(command: str, args: list[str], env: dict, cwd: Path) -> float:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=command, args=args, cwd=str(cwd), env=env)
    start = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    with tempfile.TemporaryDirectory(prefix="bench-bytecode-") as name:
        tmp = Path(name)
        venv = tmp / "server-venv"
        env = {k: v for k, v in os.environ.items()
               if k not in ("LLM_FINETUNING_PYTHON", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
                            "PYTHONPYCACHEPREFIX")}
        env.update(LLM_FINETUNING_VENV=str(venv), LLM_FINETUNING_WORKSPACE=str(tmp), LLM_FINETUNING_WARM_UP="0")
        uv = Path(sys.executable).parent / "uv"
        if uv.exists():
            env["PATH"] = f"{uv.parent}{os.pathsep}{env['PATH']}"
        base_python = "python3"
        t0 = time.perf_counter()
        subprocess.run([base_python, str(LAUNCHER), "--prepare"], env=env, check=True, capture_output=True)
        built = time.perf_counter() - t0
        launcher = [str(LAUNCHER)]
        asyncio.run(time_to_list(base_python, launcher, env, tmp))  # warm the OS file cache
        arms = {"with bytecode (baseline)": [], "PYTHONDONTWRITEBYTECODE=1": [],
                "PYTHONDONTWRITEBYTECODE=1, no bytecode cache (before)": []}
        for i in range(repeats):
            arms["with bytecode (baseline)"].append(asyncio.run(time_to_list(base_python, launcher, env, tmp)))
            no_write = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
            arms["PYTHONDONTWRITEBYTECODE=1"].append(asyncio.run(time_to_list(base_python, launcher, no_write, tmp)))
            empty = tmp / f"empty-cache-{i}"
            before = {**no_write, "PYTHONPYCACHEPREFIX": str(empty), "PYTHONPATH": str(ROOT)}
            arms["PYTHONDONTWRITEBYTECODE=1, no bytecode cache (before)"].append(
                asyncio.run(time_to_list(str(venv / "bin" / "python"), ["-m", "mcp_server"], before, tmp)))
    medians = {label: statistics.median(times) for label, times in arms.items()}
    base = medians["with bytecode (baseline)"]
    print(f"light environment built by the launcher in {built:.1f} s (bytecode written as it builds)")
    print(f"server start to tools/list, median of {repeats}:")
    for label, seconds in medians.items():
        line = f"  {label:55} {seconds:6.2f} s   {seconds / base:5.2f}x"
        if label == "PYTHONDONTWRITEBYTECODE=1":
            line += f"   goal <= 1.2x: {'PASS' if seconds <= 1.2 * base else 'FAIL'}"
        print(line)
    return 0 if medians["PYTHONDONTWRITEBYTECODE=1"] <= 1.2 * base else 1


if __name__ == "__main__":
    sys.exit(main())

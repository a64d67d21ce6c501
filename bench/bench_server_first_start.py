"""First start of the server in a fresh environment directory, and warm validate/emit latency over MCP.

1. First start: `scripts/launch_server.py` with LLM_FINETUNING_VENV pointing at a fresh directory, timed from
   the process start until `tools/list` is answered (it builds the light environment first). Beside it, the
   MCP SDK's hello world (a one-tool MCPServer) started from a fresh venv built the same way. Both ways the
   launcher builds: with uv on PATH (uv venv + uv pip install; uv comes with the test extra) and with pip
   alone (venv without pip, then `pip --python ... install`). Goal: ours within 10 s, and the ratio ours /
   hello world.
2. Warm calls over one MCP session: the first validate_grpo_config (TRL's import) and later validations and
   emissions, with the server being the training interpreter (in-process) and with the server in the light
   environment and LLM_FINETUNING_PYTHON = this (full) Python (the persistent worker). Goal: later calls < 0.05 s.

    .venv/bin/python bench/bench_server_first_start.py
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "scripts" / "launch_server.py"
BASE_PYTHON = shutil.which("python3") or sys.executable
HELLO = '''
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("hello")


@mcp.tool()
def hello(name: str) -> str:
    """Say hello."""
    return f"hello {name}"


mcp.run("stdio")
'''
# Built the way the launcher builds its environment (see scripts/launch_server.py install_plans).
HELLO_LAUNCH = {
    "pip": 'set -e; "$PY" -m venv --without-pip "$VENV"; '
           '"$PY" -m pip --python "$VENV/bin/python" install --quiet --no-compile --disable-pip-version-check "mcp>=2" '
           '>&2; '
           'exec "$VENV/bin/python" "$HELLO"',
    "uv": 'set -e; uv venv --quiet --python "$PY" "$VENV" >&2; uv pip install --quiet --python "$VENV/bin/python" '
          '"mcp>=2" >&2; '
          'exec "$VENV/bin/python" "$HELLO"',
}
UV = shutil.which("uv") or (
    str(Path(sys.executable).parent / "uv") if (Path(sys.executable).parent / "uv").exists() else None
)


def path_for(installer: str) -> str:
    """PATH with uv first (installer 'uv'), or without any uv (installer 'pip')."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "uv").exists()]
    if installer == "uv":
        dirs.insert(0, str(Path(UV).parent))
    return os.pathsep.join(dirs)


async def time_to_list(command: str, args: list[str], env: dict, cwd: Path) -> tuple[float, int]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=command, args=args, cwd=str(cwd), env=env)
    start = time.perf_counter()
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        return time.perf_counter() - start, len(tools)


def first_start(tmp: Path, installer: str) -> tuple[float, int, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_FINETUNING_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = path_for(installer)
    ours_env = {**env, "LLM_FINETUNING_VENV": str(tmp / f"ours-{installer}"), "LLM_FINETUNING_WORKSPACE": str(tmp)}
    ours, n = asyncio.run(time_to_list(BASE_PYTHON, [str(LAUNCHER)], ours_env, tmp))
    (tmp / "hello.py").write_text(HELLO)
    hello_env = {**env, "PY": BASE_PYTHON, "VENV": str(tmp / f"hello-{installer}"), "HELLO": str(tmp / "hello.py")}
    hello, _ = asyncio.run(time_to_list("bash", ["-c", HELLO_LAUNCH[installer]], hello_env, tmp))
    return ours, n, hello


async def warm_calls(command: str, args: list[str], env: dict, cwd: Path, emits: int = 3, validations: int = 5) -> dict:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=command, args=args, cwd=str(cwd), env=env)
    config = {"model_name_or_path": "tiny", "learning_rate": 1e-6, "num_generations": 4,
              "per_device_train_batch_size": 4, "reward_funcs": ["mcp_server.rewards.format_reward"]}
    times: dict[str, list[float]] = {"validate": [], "emit": []}
    async with Client(params) as client:
        for i in range(validations):
            start = time.perf_counter()
            result = await client.call_tool("validate_grpo_config", {"config": config, "gpu": "H100"})
            times["validate"].append(time.perf_counter() - start)
            assert not result.is_error, result
        for i in range(emits):
            start = time.perf_counter()
            result = await client.call_tool("emit_grpo_config", {
                "model": "tiny", "dataset": "tiny", "gpu": "cpu", "run_name": f"bench-{i}",
                "rewards": [{"name": "format"}]})
            times["emit"].append(time.perf_counter() - start)
            assert not result.is_error, result
    return times


def warm(tmp: Path, light_venv: Path) -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_FINETUNING_PYTHON",)}
    env["LLM_FINETUNING_WORKSPACE"] = str(tmp)
    in_process = asyncio.run(warm_calls(sys.executable, ["-m", "mcp_server"], {**env, "PYTHONPATH": str(ROOT)}, tmp))
    worker_env = {**env, "LLM_FINETUNING_VENV": str(light_venv), "LLM_FINETUNING_PYTHON": sys.executable}
    worker = asyncio.run(warm_calls(BASE_PYTHON, [str(LAUNCHER)], worker_env, tmp))
    return {
        "in-process (server = training Python)": in_process,
        "worker (light server + LLM_FINETUNING_PYTHON)": worker,
    }


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-first-start-") as name:
        tmp = Path(name)
        print("first start to tools/list on a fresh environment directory (builds it):")
        ok = True
        for installer in ["uv", "pip"] if UV else ["pip"]:
            ours, n, hello = first_start(tmp, installer)
            print(f"  with {installer}: llm-finetuning ({n} tools) {ours:6.2f} s   goal < 10 s: "
                  f"{'PASS' if ours < 10 else 'FAIL'}   MCP SDK hello world (1 tool, built the same way) "
                  f"{hello:6.2f} s   ratio {ours / hello:5.2f}x")
            ok = ok and ours < 10
        if not UV:
            print("  (uv not found: install it, e.g. pip install uv, to measure the launcher's uv path)")
        later = asyncio.run(time_to_list(BASE_PYTHON, [str(LAUNCHER)], {
            **os.environ, "LLM_FINETUNING_VENV": str(tmp / "ours-pip"), "LLM_FINETUNING_WORKSPACE": str(tmp)}, tmp))[0]
        print(f"  llm-finetuning, second start (environment ready): {later:6.2f} s")

        results = warm(tmp, tmp / "ours-pip")
        print("\nvalidate / emit over one MCP session (seconds):")
        for label, times in results.items():
            v, e = times["validate"], times["emit"]
            later_v = statistics.median(v[1:])
            print(f"  {label}")
            print(f"    first validate {v[0]:6.2f}   later validates median {later_v:6.3f}   "
                  f"emits {', '.join(f'{t:.3f}' for t in e)}")
            ok = ok and later_v < 0.05
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

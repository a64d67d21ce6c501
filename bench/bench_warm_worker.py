"""The first TRL check a person waits for: over MCP 5 s after the server starts, and on a repeated CLI call.

1. MCP (the SDK's client over stdio): `initialize` + `tools/list` time, then, 5 s after the start, the first
   validate_grpo_config, against a warm validate (the median of the next ones) in the same session. Both ways the
   server runs: in the training interpreter (this Python) and as a light server whose training interpreter is
   another Python (LLM_FINETUNING_PYTHON, a wrapper around this one: the persistent worker). Each with the
   background warm-up (the default) and without it (LLM_FINETUNING_WARM_UP=0, as before).
   Goals: first validate within 2x a warm one; `initialize` + `tools/list` no slower than without the warm-up.
   (What the SDK's client builds on its own first tools/call, jsonschema's validator for the tool's output schema
   included, is built here beforehand, so the first call's figure is the server's answer, not the client's one-time
   work: `client_first_use`; and this process's client has made one call to the SDK's hello world beforehand,
   never to the server measured: `client_warmed_elsewhere`.)
   Also printed: a warm call after as long an idle as the first call had. The warm calls come back to back; a
   call after seconds of idling costs more even on a warm server and client (the SDK's own hello world: about
   2x), so "first / it" is what the first call still pays for being first.
2. CLI: `llm-finetuning validate-config` run again and again, with the per-user warm worker (the default: the
   first call starts it, later ones reuse it) and without it (LLM_FINETUNING_CLI_WORKER=0: every call imports
   TRL). Goal: a repeated call does not pay the import again (ratio with / without).

    .venv/bin/python bench/bench_warm_worker.py [--repeats 3] [--wait 5] [--mcp-only]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"model_name_or_path": "tiny", "learning_rate": 1e-6, "num_generations": 4,
          "per_device_train_batch_size": 4, "reward_funcs": ["mcp_server.rewards.format_reward"]}


def client_first_use(session, tool: str) -> None:
    """What the SDK's client builds on its own first tools/call, built here beforehand so the first call's figure is
    the server's answer: the validator for the tool's output schema (tens of ms, ~60x a validation, says the SDK),
    the request model (built on its first use) and the validator of the tools/call result at the session's protocol
    version. Nothing here reaches the server."""
    from mcp_types import CallToolRequest, CallToolRequestParams
    from mcp_types.methods import serialize_server_result

    session._output_schema_validator(tool, session._tool_output_schemas[tool])
    CallToolRequest(params=CallToolRequestParams(name=tool, arguments={}))
    serialize_server_result("tools/call", session.protocol_version, {"content": [], "resultType": "complete"})


async def client_warmed_elsewhere() -> None:
    """One tool call to the SDK's hello world (bench_server_startup.HELLO), never to the server measured: this
    process's client code has then run a call, as a harness's has long before it starts a server, so the first
    session's first call does not also pay this process's first tools/call."""
    from bench_server_startup import HELLO
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async with Client(StdioServerParameters(command=sys.executable, args=HELLO)) as client:
        await client.call_tool("hello", {"name": "bench"})


VALIDATE = ("validate_grpo_config", {"config": CONFIG, "gpu": "H100"})


async def session(env: dict, cwd: Path, wait_s: float = 5.0, warm_calls: int = 4, idle_again: bool = False,
                  server: list[str] | None = None, call_args: tuple[str, dict] = VALIDATE) -> dict:
    """The first call (a validation) `wait_s` after the start, then `warm_calls` back to back (their median:
    "warm"); with `idle_again`, one more after as long an idle as the first call had ("warm after idle": what idling
    alone costs a warm server and client). `server`: another server's arguments (the SDK's hello world)."""
    import jsonschema  # noqa: F401  the client checks a tool's result with it: its import is the client's own cost
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async def call() -> float:
        t0 = time.perf_counter()
        result = await client.call_tool(*call_args)
        assert not result.is_error, result
        return time.perf_counter() - t0

    params = StdioServerParameters(command=sys.executable, args=server or ["-m", "mcp_server"], cwd=str(cwd), env=env)
    start = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        listed = time.perf_counter() - start
        client_first_use(client.session, call_args[0])
        idle = max(0.0, wait_s - (time.perf_counter() - start))
        await asyncio.sleep(idle)
        times = [await call() for _ in range(1 + warm_calls)]
        if idle_again:
            await asyncio.sleep(idle)
            after_idle = await call()
    return {"list": listed, "first": times[0], "warm": statistics.median(times[1:]),
            "after_idle": after_idle if idle_again else math.nan}


def mcp_part(tmp: Path, repeats: int, wait_s: float) -> bool:
    wrapper = tmp / "other-env" / "bin" / "python"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    base = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_FINETUNING_WORKSPACE": str(tmp)}
    base.pop("LLM_FINETUNING_PYTHON", None)
    modes = {"in-process (server = training Python)": {},
             "worker (LLM_FINETUNING_PYTHON = another Python)": {"LLM_FINETUNING_PYTHON": str(wrapper)}}
    ok = True
    asyncio.run(client_warmed_elsewhere())
    print(f"MCP: first validate_grpo_config {wait_s:g} s after start vs a warm one (median of {repeats} sessions each)")
    for label, extra in modes.items():
        results = {}
        for warm in ("1", "0"):
            runs = [asyncio.run(session({**base, **extra, "LLM_FINETUNING_WARM_UP": warm}, tmp, wait_s,
                                        idle_again=warm == "1"))
                    for _ in range(repeats)]
            results[warm] = {k: statistics.median(r[k] for r in runs) for k in ("list", "first", "warm", "after_idle")}
            results[warm]["ratios"] = sorted(r["first"] / r["warm"] for r in runs)
        on, off = results["1"], results["0"]
        ratio = on["first"] / on["warm"]
        ok = ok and ratio <= 2
        print(f"  {label}")
        print(f"    with warm-up:    initialize+tools/list {on['list']:5.2f} s   first validate {on['first']:6.3f} s   "
              f"warm {on['warm']:6.3f} s   first/warm {ratio:5.2f}x   goal <= 2x: {'PASS' if ratio <= 2 else 'FAIL'}")
        print(f"    first/warm per session: {' '.join(f'{r:.2f}x' for r in on['ratios'])};   a warm call after "
              f"as long an idle {on['after_idle']:6.3f} s ({on['after_idle'] / on['warm']:4.2f}x warm; first / it "
              f"{on['first'] / on['after_idle']:4.2f}x)")
        print(f"    without (before): initialize+tools/list {off['list']:5.2f} s   first validate {off['first']:6.3f} s"
              f"   warm {off['warm']:6.3f} s   first/warm {off['first'] / off['warm']:5.1f}x")
        print(f"    tools/list with / without warm-up: {on['list'] / off['list']:4.2f}x")
    floor = idle_floor(base, tmp, repeats, wait_s)
    print(f"  the SDK's hello world, the same way: a warm call after as long an idle {floor:4.2f}x its warm call "
          "(what idling costs any server and client on this machine)")
    return ok


def idle_floor(env: dict, cwd: Path, repeats: int, wait_s: float) -> float:
    """A hello-world call after as long an idle as the first validation had, over its back-to-back warm call
    (median of `repeats` sessions): the cost of idling alone, with no warm-up to do."""
    from bench_server_startup import HELLO

    runs = [asyncio.run(session(env, cwd, wait_s, idle_again=True, server=HELLO, call_args=("hello", {"name": "x"})))
            for _ in range(repeats)]
    return statistics.median(r["after_idle"] / r["warm"] for r in runs)


def cli_part(tmp: Path, repeats: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_FINETUNING_WORKSPACE": str(tmp),
           "XDG_RUNTIME_DIR": str(tmp / "runtime"), "LLM_FINETUNING_WORKER_IDLE_S": "60"}
    env.pop("LLM_FINETUNING_PYTHON", None)
    (tmp / "runtime").mkdir(mode=0o700)
    config = tmp / "config.yaml"
    config.write_text("".join(f"{k}: {v if not isinstance(v, list) else v[0]}\n" for k, v in CONFIG.items())
                      .replace("reward_funcs: ", "reward_funcs:\n- "))
    cmd = [sys.executable, "-m", "mcp_server.cli", "validate-config", str(config), "--gpu", "H100"]

    def timed(extra: dict) -> float:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env={**env, **extra}, capture_output=True, text=True, cwd=tmp)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return time.perf_counter() - t0

    first = timed({})  # starts the warm worker
    with_worker, without = [], []
    for _ in range(repeats):  # interleaved: load on the machine hits both alike
        with_worker.append(timed({}))
        without.append(timed({"LLM_FINETUNING_CLI_WORKER": "0"}))
    hello = statistics.median(timed_hello(env) for _ in range(repeats))
    w, wo = statistics.median(with_worker), statistics.median(without)
    print(f"\nCLI validate-config, median of {repeats} (seconds):")
    print(f"  first call (starts the warm worker, imports TRL there)   {first:6.2f}")
    print(f"  repeated, warm worker running                            {w:6.2f}")
    print(f"  repeated, LLM_FINETUNING_CLI_WORKER=0 (before: imports TRL every call) {wo:6.2f}")
    print(f"  `llm-finetuning list-rewards` (no TRL check)              {hello:6.2f}")
    print(f"  ratio warm worker / without: {w / wo:4.2f}x   warm worker / list-rewards: {w / hello:4.2f}x")
    stop_daemons(tmp / "runtime")


def timed_hello(env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mcp_server.cli", "list-rewards"], env=env, capture_output=True, check=True)
    return time.perf_counter() - t0


def stop_daemons(runtime: Path) -> None:
    """End the warm workers this bench started (they would end after their idle time)."""
    import json
    import signal
    import socket

    for path in runtime.glob("llm-finetuning/worker-*.sock"):
        with socket.socket(socket.AF_UNIX) as conn:
            try:
                conn.connect(str(path))
                conn.sendall(b'{"hello": 1}\n')
                os.kill(json.loads(conn.makefile().readline())["pid"], signal.SIGTERM)
            except (OSError, ValueError, KeyError):
                pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wait", type=float, default=5.0, help="Seconds from the start to the first validation "
                        "(the goal's 5 s; on a loaded machine TRL's import alone can take longer).")
    parser.add_argument("--mcp-only", action="store_true")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as name:
        ok = mcp_part(Path(name), opts.repeats, opts.wait)
        if not opts.mcp_only:
            cli_part(Path(name), opts.repeats)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

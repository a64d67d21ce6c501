"""Shared fixtures: the offline tiny model, an isolated workspace, and the two doors (CLI and MCP stdio)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Nothing in the tests may reach a hub.
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Nothing the suite builds (the tiny model, warm-started models) is read from or left in ~/.cache: a cache
# per session, set before anything builds and inherited by every child process (CLI, MCP server, training).
_CACHE = tempfile.mkdtemp(prefix="llm-finetuning-test-cache-")
os.environ["LLM_FINETUNING_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The embedded tiny model, built once per session into the session's cache (LLM_FINETUNING_CACHE)."""
    from mcp_server.tiny import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture()
def workspace(tmp_path, monkeypatch) -> Path:
    """An empty workspace root; core calls and child processes write under it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(ws))
    return ws


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600):
    """Run the installed `llm-finetuning` console script; returns CompletedProcess (text)."""
    exe = BIN / "llm-finetuning"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "mcp_server.cli"]
    return subprocess.run(
        cmd + list(args), cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )


def run_cli_json(*args: str, **kwargs):
    proc = run_cli(*args, "--json", **kwargs)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (rc={proc.returncode}):\nstdout={proc.stdout}\nstderr={proc.stderr}")


async def call_mcp(calls, env: dict | None = None):
    """Start `python -m mcp_server` over stdio with the SDK's client and run `calls(client)`."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server"], cwd=str(ROOT), env={**os.environ, **(env or {})}
    )
    async with Client(params) as client:
        return await calls(client)

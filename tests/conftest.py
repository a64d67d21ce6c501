"""Shared fixtures: the offline tiny model, an isolated workspace, and the two doors (CLI and MCP stdio)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Nothing in the tests may reach a hub.
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The embedded tiny model (built once, cached under LLM_FINETUNING_CACHE or ~/.cache)."""
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


async def call_mcp(calls, env: dict | None = None, **client_options):
    """Start `python -m mcp_server` over stdio with the SDK's client and run `calls(client)`; `client_options` go to
    the SDK's `Client` (e.g. `logging_callback` with `log_level`)."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server"], cwd=str(ROOT), env={**os.environ, **(env or {})}
    )
    async with Client(params, **client_options) as client:
        return await calls(client)

"""Codex's first check that starts the server: `codex mcp list` only reads the config, and a session needs a
model. Codex's app server (`codex app-server`, the JSON-RPC over stdio its IDE clients use) starts each configured
MCP server and reports its tools through `mcpServerStatus/list`, with no model and no account. Run it in your
project, as Codex would start there:

    python3 /path/to/llm-finetuning/scripts/codex_mcp_check.py      # llm-finetuning: Connected, N tools

Exits 0 when the server answered with its tools, 1 when it is missing or failed (the app server's error), 2 when
`codex` could not be run. Needs only Python's standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading


def app_server_status(codex: str, timeout: float) -> dict:
    """`mcpServerStatus/list` from a fresh `codex app-server` in the working directory."""
    proc = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PWD": os.getcwd()})
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        requests = [{"id": 0, "method": "initialize", "params": {"clientInfo": {"name": "codex_mcp_check",
                                                                                 "version": "0"}}},
                    {"method": "initialized"}, {"id": 1, "method": "mcpServerStatus/list", "params": {}}]
        for request in requests:
            proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:  # notifications come between; ends when the app server exits
            message = json.loads(line)
            if message.get("id") == 1:
                if "error" in message:
                    raise RuntimeError(f"mcpServerStatus/list failed: {message['error']}")
                return message["result"]
        raise RuntimeError(f"codex app-server ended (exit {proc.wait()}, after {timeout:.0f} s at most) "
                           "before listing the servers")
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="llm-finetuning", help="the MCP server to check (default: %(default)s)")
    parser.add_argument("--codex", default="codex", help="the codex executable (default: codex on PATH)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait (default: %(default)s)")
    args = parser.parse_args(argv)
    codex = shutil.which(args.codex)
    if not codex:
        print(f"codex_mcp_check: {args.codex!r} not found on PATH", file=sys.stderr)
        return 2
    try:
        status = app_server_status(codex, args.timeout)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"codex_mcp_check: {exc}", file=sys.stderr)
        return 2
    servers = {s.get("name"): s for s in status.get("data", [])}
    server = servers.get(args.server)
    if server is None:
        print(f"{args.server}: not configured in Codex here (configured: {', '.join(sorted(servers)) or 'none'})")
        return 1
    if server.get("toolsError") or not server.get("tools"):
        print(f"{args.server}: failed: {server.get('toolsError') or 'no tools listed'}")
        return 1
    print(f"{args.server}: Connected, {len(server['tools'])} tools")
    return 0


if __name__ == "__main__":
    sys.exit(main())

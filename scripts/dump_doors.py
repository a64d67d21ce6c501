"""Dump what the two doors publish: every MCP tool as `tools/list` gives it over stdio (name, description, input and
output schema) and every CLI command's `--help` and argparse flags, as one JSON document.

    python scripts/dump_doors.py              # print the dump
    python scripts/dump_doors.py --check      # compare with tests/fixtures/doors.json (exit 1 on a difference)
    python scripts/dump_doors.py --write      # refresh tests/fixtures/doors.json after an intended change

tests/test_doors_dump.py runs the check, so a refactor of the doors cannot change a schema or a flag unnoticed.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "doors.json"
WIDTH = "120"  # argparse wraps help at $COLUMNS: fixed so the dump does not depend on the terminal


async def _mcp_tools() -> list[dict]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"], cwd=str(ROOT), env=env)
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]


def _action(action: argparse.Action) -> dict:
    return {
        "flags": list(action.option_strings) or [action.dest], "dest": action.dest, "kind": type(action).__name__,
        "nargs": action.nargs, "default": repr(action.default), "type": getattr(action.type, "__name__", None),
        "choices": list(action.choices) if action.choices else None, "required": action.required,
        "metavar": action.metavar, "help": action.help,
    }


def _cli() -> dict:
    os.environ["COLUMNS"] = WIDTH
    sys.path.insert(0, str(ROOT))
    from mcp_server.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in sub._choices_actions}
    commands = {
        name: {"summary": summaries[name], "help": p.format_help(), "flags": [_action(a) for a in p._actions]}
        for name, p in sub.choices.items()
    }
    return {"order": list(sub.choices), "commands": commands}


def dump() -> dict:
    tools = asyncio.run(_mcp_tools())
    return {"mcp": {"order": [t["name"] for t in tools], "tools": {t["name"]: t for t in tools}}, "cli": _cli()}


def differences(old: dict, new: dict) -> list[str]:
    """Line diff of the two dumps, keys sorted; the order of tools and commands is compared on its own line."""
    a = json.dumps(old, indent=1, sort_keys=True).splitlines()
    b = json.dumps(new, indent=1, sort_keys=True).splitlines()
    return list(difflib.unified_diff(a, b, "fixture", "now", lineterm="", n=2))


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    now = dump()
    if mode == "--write":
        FIXTURE.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {FIXTURE.relative_to(ROOT)}")
        return 0
    if mode == "--check":
        diff = differences(json.loads(FIXTURE.read_text(encoding="utf-8")), now)
        print("\n".join(diff) if diff else f"identical to {FIXTURE.relative_to(ROOT)}")
        return 1 if diff else 0
    print(json.dumps(now, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

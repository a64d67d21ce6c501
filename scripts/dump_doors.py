"""Dump what the two doors publish, one JSON file per tool under tests/fixtures/doors/: its MCP tool as `tools/list`
gives it over stdio (name, description, annotations, input and output schema) and its CLI command's `--help` and
argparse flags; `order.json` holds the order both doors list them in. A schema change is then a one-file diff.

    python scripts/dump_doors.py              # print the dump
    python scripts/dump_doors.py --check      # compare with tests/fixtures/doors/ (exit 1 on a difference)
    python scripts/dump_doors.py --write      # refresh tests/fixtures/doors/ after an intended change

tests/test_tool_registry.py runs the check, so a refactor of the doors cannot change a schema or a flag unnoticed.
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
sys.path.insert(0, str(ROOT))  # this checkout's doors, whatever mcp_server the interpreter's site-packages holds
FIXTURES = ROOT / "tests" / "fixtures" / "doors"
ORDER = "order"  # order.json: the doors' listing order (no tool is named so)
WIDTH = "120"  # argparse wraps help at $COLUMNS: fixed so the dump does not depend on the terminal


async def _mcp_tools() -> list[dict]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("LLM_FINETUNING_READ_ONLY", None)  # every tool
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


def _cli() -> tuple[list[str], dict]:
    os.environ["COLUMNS"] = WIDTH
    from mcp_server.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in sub._choices_actions}
    commands = {
        name: {"command": name, "summary": summaries[name], "help": p.format_help(),
               "flags": [_action(a) for a in p._actions]}
        for name, p in sub.choices.items()
    }
    return list(sub.choices), commands


def dump() -> dict[str, dict]:
    """{file stem: its content}: one entry per registered tool ({"mcp": ..., "cli": ...}) and the order."""
    from mcp_server.tools import TOOLS

    tools = {t["name"]: t for t in asyncio.run(_mcp_tools())}
    order, commands = _cli()
    files = {spec.name: {"mcp": tools.get(spec.name), "cli": commands.get(spec.command)} for spec in TOOLS}
    files[ORDER] = {"mcp": list(tools), "cli": order}
    return files


def load() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(FIXTURES.glob("*.json"))}


def differences(old: dict, new: dict) -> list[str]:
    """Line diff of the two dumps, file by file, keys sorted (a file only on one side shows whole)."""
    diff: list[str] = []
    for name in sorted(set(old) | set(new)):
        a = json.dumps(old[name], indent=1, sort_keys=True).splitlines() if name in old else []
        b = json.dumps(new[name], indent=1, sort_keys=True).splitlines() if name in new else []
        diff += difflib.unified_diff(a, b, f"fixture {name}.json", f"now {name}.json", lineterm="", n=2)
    return diff


def write(files: dict[str, dict]) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for stale in set(load()) - set(files):  # a tool renamed or removed: its file goes too
        (FIXTURES / f"{stale}.json").unlink()
    for name, content in files.items():
        (FIXTURES / f"{name}.json").write_text(json.dumps(content, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    now = dump()
    sys.path.insert(0, str(ROOT / "scripts"))
    import launch_front  # the launcher's first answers (scripts/first_answers.json) follow the doors

    if mode == "--write":
        write(now)
        launch_front.write()
        print(f"wrote {len(now)} files under {FIXTURES.relative_to(ROOT)}/ and scripts/first_answers.json")
        return 0
    if mode == "--check":
        diff = differences(load(), now)
        print("\n".join(diff) if diff else f"identical to {FIXTURES.relative_to(ROOT)}/")
        first = launch_front.stale()
        if first:
            print("scripts/first_answers.json is stale (scripts/dump_doors.py --write)")
        return 1 if diff or first else 0
    print(json.dumps(now, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

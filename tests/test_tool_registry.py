"""The tool registry (`mcp_server.tools.TOOLS`, each package's tools.py): every registered tool has its MCP door, its
CLI command and its row in the README's tool table, and what the doors publish (every MCP tool schema over stdio,
every command's --help and flags) is what tests/fixtures/doors.json holds."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import dump_doors  # noqa: E402  (scripts/ is no package)

from mcp_server.tools import TOOLS  # noqa: E402


def readme_tool_names() -> set[str]:
    """The names in the first column of README.md's tool table ("## The tools")."""
    section = ROOT.joinpath("README.md").read_text(encoding="utf-8").split("## The tools", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


def test_every_registered_tool_has_a_door_a_command_and_a_readme_row():
    from mcp_server.cli import build_parser
    from mcp_server.server import mcp

    listed = [t.name for t in asyncio.run(mcp.list_tools())]
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    in_readme = readme_tool_names()
    names = [spec.name for spec in TOOLS]
    assert len(names) == len(set(names)) and len({s.command for s in TOOLS}) == len(TOOLS), "a name registered twice"
    for spec in TOOLS:
        if spec.description is not None:
            assert spec.name in listed, f"{spec.name} has no MCP tool"
        assert spec.command in commands, f"{spec.name} has no CLI command {spec.command}"
        assert spec.name in in_readme, f"{spec.name} has no row in README.md's tool table"
    assert listed == [s.name for s in TOOLS if s.description is not None], "the server lists a tool not registered"
    assert list(commands) == [s.command for s in TOOLS], "the CLI has a command not registered"
    assert in_readme <= set(names), f"README's tool table names unregistered tools: {in_readme - set(names)}"


def test_doors_publish_what_the_fixture_holds():
    """Every MCP schema and every CLI flag as committed; after an intended change of a door, refresh the fixture
    with `python scripts/dump_doors.py --write` and review its diff."""
    import json

    diff = dump_doors.differences(json.loads(dump_doors.FIXTURE.read_text(encoding="utf-8")), dump_doors.dump())
    assert not diff, "the doors changed (python scripts/dump_doors.py --write after an intended change):\n" + \
        "\n".join(diff[:80])

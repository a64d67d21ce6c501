"""The CLI as a whole: every command's help renders, and every MCP tool has a CLI command of the same name."""

from __future__ import annotations

import argparse
import asyncio

from mcp_server.cli import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_help_renders():
    build_parser().format_help()
    for name, sub in _subcommands().items():
        assert sub.format_help(), name


def test_every_tool_is_also_a_cli_command():
    from mcp_server.server import mcp

    tools = {t.name for t in asyncio.run(mcp.list_tools())}
    commands = {name.replace("-", "_") for name in _subcommands()}
    aliases = {"emit_grpo_config": "emit_config", "validate_grpo_config": "validate_config"}
    assert {aliases.get(t, t) for t in tools} <= commands

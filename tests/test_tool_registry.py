"""The tool registry (`mcp_server.tools.TOOLS`, each package's tools.py): every registered tool has its MCP door, its
CLI command and its row in the README's tool table, its annotations come from its declared Effects, the read-only
server mode lists only the tools that write nothing, and what the doors publish (every MCP tool schema over stdio,
every command's --help and flags) is what tests/fixtures/doors/ holds, one file per tool."""

from __future__ import annotations

import pytest
import argparse
import asyncio
import os
import re
import sys

from conftest import ROOT, call_mcp

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


@pytest.mark.slow
def test_doors_publish_what_the_fixture_holds():
    """Every MCP schema and every CLI flag as committed; after an intended change of a door, refresh the fixture
    with `python scripts/dump_doors.py --write` and review its diff."""
    diff = dump_doors.differences(dump_doors.load(), dump_doors.dump())
    assert not diff, "the doors changed (python scripts/dump_doors.py --write after an intended change):\n" + \
        "\n".join(diff[:80])


@pytest.mark.slow
def test_the_launchers_first_answers_are_what_the_server_answers():
    """A first start answers initialize and the lists from scripts/first_answers.json while the server's environment
    builds (issue 49): they must be the server's own answers, for every protocol version."""
    import launch_front

    assert not launch_front.stale(), "python scripts/dump_doors.py --write (the launcher's first answers changed)"
    assert launch_front.load_answers() is not None


HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def _listed(env: dict | None = None, args: tuple[str, ...] = ()) -> list[dict]:
    async def calls(client):
        tools = (await client.list_tools()).tools
        listed = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        if args or env:  # the read-only server: a read-only tool answers, a writing one is not there
            assert not (await client.call_tool("list_rewards", {})).is_error
            refused = await client.call_tool("emit_grpo_config", {"model": "tiny", "dataset": "tiny"})
            assert refused.is_error and "emit_grpo_config" in refused.content[0].text
        return listed

    if not args:
        return asyncio.run(call_mcp(calls, env=env))
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async def with_flag():
        params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server", *args], cwd=str(ROOT),
                                       env=dict(os.environ))
        async with Client(params) as client:
            return await calls(client)

    return asyncio.run(with_flag())


@pytest.mark.slow
def test_tools_list_carries_every_tools_annotations_from_its_effects():
    """Over stdio with the SDK's client: all four hints on every tool, as its Effects declare them; the tools that
    act on the world are not read-only, the ones that only read are."""
    specs = {spec.name: spec for spec in TOOLS if spec.description is not None}
    listed = {t["name"]: t.get("annotations", {}) for t in _listed()}
    assert set(listed) == set(specs)
    for name, hints in listed.items():
        effects = specs[name].effects
        assert hints == {"readOnlyHint": not effects.writes, "destructiveHint": effects.destroys,
                         "idempotentHint": effects.repeatable, "openWorldHint": effects.open_world}, name
    for name in ("launch_training", "stop_training", "resume_training", "export_model", "record_inspection_verdict",
                 "emit_grpo_config", "sample_completions", "check_environment", "prepare_environment"):
        assert listed[name]["readOnlyHint"] is False, name
    for name in ("plan_memory", "validate_grpo_config", "list_rewards", "diagnose_run", "training_status"):
        assert listed[name]["readOnlyHint"] is True, name
    assert listed["stop_training"]["destructiveHint"] and listed["prepare_environment"]["openWorldHint"]


@pytest.mark.slow
def test_read_only_mode_lists_only_the_tools_that_change_nothing():
    """`python -m mcp_server --read-only` and LLM_FINETUNING_READ_ONLY=1: only tools whose Effects write nothing,
    each read-only by its annotations; a writing tool cannot be called (it is not there)."""
    expected = [spec.name for spec in TOOLS if spec.description is not None and not spec.effects.writes]
    assert len(expected) >= 5
    for listed in (_listed(args=("--read-only",)), _listed(env={"LLM_FINETUNING_READ_ONLY": "1"})):
        assert [t["name"] for t in listed] == expected
        assert all(t["annotations"]["readOnlyHint"] is True for t in listed)


# m14 #19: every value LLM_FINETUNING_READ_ONLY can have x the tool list. Off (toolspec.READ_ONLY_OFF, written out
# here): unset, empty, 0, false, no, off, in any case with spaces around. Every other value is on, an unknown one
# too (a value nobody meant as off never unlocks the tools that write).
READ_ONLY_VALUES = {None: False, "": False, "0": False, "false": False, "no": False, "off": False, "FALSE": False,
                    " No ": False, " 0 ": False, "Off": False,
                    "1": True, "true": True, "yes": True, "on": True, "TRUE": True, " yes ": True, "2": True,
                    "maybe": True, "-1": True}


@pytest.fixture(scope="module")
def listed_by_value():
    """{value: the tool names tools/list gives}, one server per value, all started at once."""
    async def names(client):
        return [t.name for t in (await client.list_tools()).tools]

    async def every():
        return await asyncio.gather(*(call_mcp(names, env=None if value is None else {
            "LLM_FINETUNING_READ_ONLY": value}) for value in READ_ONLY_VALUES))

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("LLM_FINETUNING_READ_ONLY", raising=False)
        return dict(zip(READ_ONLY_VALUES, asyncio.run(every()), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("value", READ_ONLY_VALUES, ids=[repr(v) for v in READ_ONLY_VALUES])
def test_each_read_only_value_gives_its_tool_list(value, listed_by_value):
    every = [spec.name for spec in TOOLS if spec.description is not None]
    reads = [spec.name for spec in TOOLS if spec.description is not None and not spec.effects.writes]
    assert 5 <= len(reads) < len(every)
    assert listed_by_value[value] == (reads if READ_ONLY_VALUES[value] else every), value

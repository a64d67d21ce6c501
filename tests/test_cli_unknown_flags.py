"""A flag a command does not take gets the nearest of that command's own flags (walk 12: `emit-config ... --gpus
cpu` got argparse's bare "unrecognized arguments: --gpus cpu", no word of --gpu). The rows are generated from the
CLI's own parser: each long flag of each command, misspelt by one letter more (as --gpu became --gpus), through the
CLI door (cli.main); nothing runs, so every row is cheap. A new flag gets its row without a new test."""

from __future__ import annotations

import argparse

import pytest
from conftest import cli_here

from mcp_server.cli import build_parser
from mcp_server.tools import TOOLS


def _flags(command: str) -> list[str]:
    parser = build_parser(only=command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return [flag for action in sub._actions for flag in action.option_strings if flag.startswith("--")]


def _misspelt(flag: str) -> str:
    return flag + ("x" if flag.endswith("s") else "s")


ROWS = [(spec.command, flag) for spec in TOOLS for flag in _flags(spec.command)
        if not any(other.startswith(_misspelt(flag)) for other in _flags(spec.command))]


def test_every_command_s_flags_are_rows():
    assert len({command for command, _ in ROWS}) == len(TOOLS) and len(ROWS) > 3 * len(TOOLS)


@pytest.mark.parametrize("command, flag", ROWS)
def test_a_misspelt_flag_gets_the_command_s_own_nearest_flag(command, flag):
    wrong = _misspelt(flag)
    proc = cli_here(command, wrong, "x")
    assert proc.returncode == 2, proc.stderr
    said = proc.stderr.strip().splitlines()[-1]
    assert said.startswith(f"llm-finetuning {command}: error: unrecognized arguments: {wrong} (did you mean "), said
    assert repr(flag) in said.split("(did you mean ", 1)[1].split("?)")[0], said
    assert f"not a flag of {command} (`llm-finetuning {command} --help` lists them)" in said, said


def test_the_walk_s_line_names_gpu_and_a_flag_with_nothing_near_is_still_named(workspace):
    said = cli_here("emit-config", "--model", "tiny", "--gpus", "cpu").stderr
    assert "unrecognized arguments: --gpus (did you mean '--gpu'" in said, said
    said = cli_here("emit-config", "--model", "tiny", "--qqqqzzzz", "--jsn").stderr
    assert "unrecognized arguments: --qqqqzzzz; --jsn (did you mean '--json'?): not flags of emit-config" in said, said
    # an abbreviation argparse accepts, and anything after "--", is never refused as unknown
    assert "unrecognized" not in cli_here("list-runs", "--jso").stderr

"""Every on/off flag of the CLI (m14 #18, issue 48), generated from the CLI's own parser: each field a command reads
as a switch (`--kill`), an inverted switch (`--no-rehearse`) or a --x/--no-x pair, x absent and given. Absent, the
request carries the tool's declared default (what MCP's tools/list publishes, what an MCP call without the field
gets); given, the opposite (the pair: each side its own value). A new switch gets its rows without a new test.

What the request carried is read where the CLI builds it: the command's parser (cli.build_parser) and
cli_flags.request_from, the two steps cli._run takes before the tool runs; nothing runs, so every row is cheap."""

from __future__ import annotations

import argparse
import typing

import pytest

from mcp_server.cli import build_parser
from mcp_server.cli_flags import _plain, request_from
from mcp_server.tools import TOOLS


def _command(spec) -> argparse.ArgumentParser:
    parser = build_parser(only=spec.command)
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[spec.command]


def _required(spec, command: argparse.ArgumentParser) -> list[str]:
    """Values for the command's required arguments (its first choice, else a name) and for its request's required
    fields (a command that reads the whole request from --request takes them as flags too)."""
    argv, given = [], set()
    for action in command._actions:
        if action.option_strings and not action.required:
            continue
        value = str(action.choices[0]) if action.choices else "x"
        argv += [value] if not action.option_strings else [action.option_strings[0], value]
        given.add(action.dest)
    for name, _, flag in command.get_default("_fields"):
        info = spec.request.model_fields[name]
        if info.is_required() and name not in given:
            kind = _plain(info.annotation)
            argv += [flag, str(typing.get_args(kind)[0]) if typing.get_origin(kind) is typing.Literal else "x"]
    return argv


def _switches() -> list[tuple]:
    """(spec, field, how it is read, its flag, the flag that gives the other value or None)."""
    rows = []
    for spec in TOOLS:
        if not spec.request:
            continue
        command = _command(spec)
        pairs = {a.dest: a for a in command._actions if isinstance(a, argparse.BooleanOptionalAction)}
        for name, read, flag in command.get_default("_fields"):
            if read in ("switch", "invert"):
                rows.append((spec, name, read, flag, None))
            elif name in pairs:
                on, off = (o for o in pairs[name].option_strings if o.startswith("--"))
                rows.append((spec, name, "pair", on if not on.startswith("--no-") else off,
                             off if not on.startswith("--no-") else on))
    return rows


SWITCHES = _switches()


def carried(spec, *flags: str):
    """The request `llm-finetuning <command> <required arguments> <flags>` builds."""
    argv = [spec.command, *_required(spec, _command(spec)), *flags]
    return request_from(spec, build_parser(only=spec.command).parse_args(argv))


@pytest.mark.parametrize("spec, name, read, flag, other", SWITCHES,
                         ids=[f"{s.command} {flag}" for s, _, _, flag, _ in SWITCHES])
def test_a_switch_absent_is_the_declared_default_and_given_is_the_opposite(spec, name, read, flag, other):
    declared = spec.request.model_fields[name].default
    assert getattr(carried(spec), name) == declared
    if read == "pair":
        assert (getattr(carried(spec, flag), name), getattr(carried(spec, other), name)) == (True, False)
    else:
        assert isinstance(declared, bool) and getattr(carried(spec, flag), name) is (not declared), (flag, declared)
        assert flag.startswith("--no-") == (read == "invert") == declared, (flag, read, declared)


def test_the_table_holds_every_kind_of_switch():
    """The generator finds each kind (one the walk no longer sees would leave its rows out silently)."""
    found = {(spec.command, flag) for spec, _, _, flag, _ in SWITCHES}
    assert {("validate-config", "--no-rehearse"), ("plan-memory", "--no-validate"), ("launch-training", "--no-submit"),
            ("stop-training", "--kill"), ("plan-memory", "--use-vllm"), ("emit-config", "--thinking")} <= found, found

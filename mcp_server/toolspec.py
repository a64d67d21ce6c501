"""What one tool is, declared once beside its package's models (`<package>/tools.py`): the request and result models,
the core function (imported by name), the MCP description, and what the command line adds (`Command`: the command's
name and summary, a positional argument, renamed or hidden fields, the human-readable summary, the exit code).

The doors (`server.py`, `cli.py`) loop over `mcp_server.tools.TOOLS`, the packages' lists in order; neither names a
tool. Light on purpose (stdlib + pydantic): a package's tools.py imports it, and the doors import every tools.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel

from mcp_server.errors import one_line


class Flag:
    """How one request field deviates on the command line: `name` ('--timeout' for timeout_s; a bare name such as
    'path' makes it positional), a shorter `help`, `invert` (a true-by-default field as a '--no-...' switch), and
    any other argparse keyword (default, metavar)."""

    def __init__(self, name: str | None = None, help: str | None = None, *, invert: bool = False, **argparse: Any):
        self.name, self.help, self.invert, self.argparse = name, help, invert, argparse


RUN = Flag("run")  # the run as the positional argument, as most commands take it


def always(result: Any) -> bool:
    return True


@dataclass(frozen=True)
class Command:
    """What the command line adds to a tool. Its flags come from the request model (cli.py); here only how they
    deviate, the summary, the readable rendering and the exit code."""

    help: str  # the one-line summary in `llm-finetuning --help`
    human: Callable[[Any], str] | None = None  # the readable summary (None: always JSON)
    ok: Callable[[Any], bool] = always  # exit 0 when true, else 1
    name: str | None = None  # the command, when it is not the tool's name with dashes
    flags: dict[str, Flag] = field(default_factory=dict)  # deviations, by field name
    hide: tuple[str, ...] = ()  # fields not offered on the command line
    whole_request: str | None = None  # help of a --request flag taking the whole request as JSON (flags override it)
    json_help: str = "Print the result as JSON."
    extra: Callable[[argparse.ArgumentParser], None] | None = None  # flags that are no field
    fold: Callable[[argparse.Namespace, dict], None] | None = None  # puts the extra flags into the request data
    handler: Callable[[argparse.Namespace, Any], int] | None = None  # instead of core + print, for an odd command


@dataclass(frozen=True)
class Effects:
    """What a call does to the world, declared with the tool: the MCP door publishes it as the tool's annotations
    (readOnlyHint is `not writes`, destructiveHint `destroys`, idempotentHint `repeatable`, openWorldHint
    `open_world`), and the read-only server mode (`--read-only`, LLM_FINETUNING_READ_ONLY=1) lists only the tools
    that do not write."""

    writes: bool  # creates or changes a file, a process or an environment a later call or person relies on
    destroys: bool = False  # may overwrite, move, stop or kill what was there (False: it only adds)
    repeatable: bool = False  # the same call again changes nothing more
    open_world: bool = False  # may reach beyond this machine: a model hub, a package index, a SLURM cluster


# Changes nothing. training_status and list_runs may record a run's derived state in its run.json (derived again from
# the process and files on every call) and training_status draws progress.png on request: bookkeeping, no decision.
READS = Effects(writes=False, repeatable=True)


@dataclass(frozen=True)
class ToolSpec:
    """One tool. `core(request)` (or `core()` without a request model) returns a `result`; a core that takes
    `report` gets progress reporting from both doors. `description` is the MCP tool's description (None: a command
    of the CLI only). `image` names a result field holding a PNG path the MCP door also returns as an image.
    `effects` (required of an MCP tool) says what a call changes."""

    name: str
    core: Callable[..., Any]
    result: type[BaseModel]
    cli: Command
    request: type[BaseModel] | None = None
    description: str | None = None
    image: str | None = None
    effects: Effects | None = None

    @property
    def command(self) -> str:
        return self.cli.name or self.name.replace("_", "-")


NULL = {"type": "null"}


# ---------------------------------------------------------------- what tools/list publishes (server.py)
def compact(schema: dict) -> dict:
    """A request's published schema without what costs an agent's context and tells it nothing: pydantic's titles
    (the field name again, "Run Dir"), and the `null` alternative of an optional field whose default is null
    (omitting it means the same; null is still accepted), the indents of a description written as a docstring.
    Descriptions, types, enums, bounds and defaults stay;
    nested models stay shared definitions ($defs)."""

    def walk(node, named: bool = False):  # named: a mapping of names (properties, $defs), not of keywords
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        node = {k: walk(v, not named and k in ("properties", "$defs")) for k, v in node.items()
                if named or k != "title"}
        if not named and isinstance(node.get("description"), str):  # a docstring's line breaks and indents
            node["description"] = " ".join(node["description"].split())
        options = node.get("anyOf")
        if not named and node.get("default", 0) is None and options and len(options) == 2 and NULL in options:
            node = {**{k: v for k, v in node.items() if k not in ("anyOf", "default")},
                    **next(o for o in options if o != NULL)}
        return node

    return walk(schema)


def outline(schema: dict | None) -> dict | None:
    """A result's published schema: its fields, their types and enums, and which are always there; a nested
    object or list is published as one (the result itself comes back as JSON text beside the structured content,
    and the tool's description says what it means)."""
    if not isinstance(schema, dict) or "properties" not in schema:
        return schema

    def shallow(node: dict) -> dict:
        if "anyOf" in node:
            options = [shallow(o) for o in node["anyOf"]]
            return {"anyOf": [o for i, o in enumerate(options) if o not in options[:i]]}
        if "$ref" in node or node.get("type") == "object":
            return {"type": "object"}
        return {k: v for k, v in node.items() if k in ("type", "enum", "const")}

    return {"type": "object", "properties": {k: shallow(v) for k, v in schema["properties"].items()},
            **({"required": schema["required"]} if "required" in schema else {})}


# Where the CLI's result goes: None is sys.stdout; the CLI process with --json sets a copy of the real stdout here,
# descriptor 1 itself then pointing at stderr (cli._result_apart).
RESULT_FILE: dict[str, Any] = {"file": None}


def result_stream():
    """The stream the CLI's result is written to (RESULT_FILE, else sys.stdout)."""
    return RESULT_FILE["file"] or sys.stdout


def print_result(result: BaseModel, as_json: bool, human: Callable[[Any], str] | None = None) -> None:
    """The CLI's output: the pydantic result as JSON for machines, else the readable summary."""
    if as_json or human is None:
        print(result.model_dump_json(indent=2), file=result_stream())
    else:  # a terminal escape or carriage return a name or log line carried is shown escaped, never acted on
        print("\n".join(one_line(line) for line in human(result).split("\n")), file=result_stream())


# LLM_FINETUNING_READ_ONLY's values that leave the mode off (any case, spaces around ignored); unset is off too.
# Every other value turns it on ("1", "true", "yes", or one misspelt): a value nobody meant as off never unlocks
# the tools that write (tests/test_tool_registry.py, each value x the tool list).
READ_ONLY_OFF = ("", "0", "false", "no", "off")


def read_only() -> bool:
    """The read-only server mode (`python -m mcp_server --read-only` sets it): only the tools that change nothing
    (here, on the ground floor, so a core that writes asks it too: training_status's plot); no user code runs
    (interpreter.user_code_allowed)."""
    return os.environ.get("LLM_FINETUNING_READ_ONLY", "").strip().lower() not in READ_ONLY_OFF

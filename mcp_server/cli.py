"""CLI door (`llm-finetuning ...`): the same core calls as the MCP tools.

Each command's flags come from its request model, the same pydantic model that is the MCP tool's schema: a field
`max_new_tokens` is the flag `--max-new-tokens`, typed, defaulted, bounded and described by the field (a Literal
gives the choices, a bool a switch, a list of choices one name or a comma list, any other list or dict JSON inline or
as @file.json). The commands are the registered
tools (`mcp_server.tools.TOOLS`); each tool's `Command` (in its package's tools.py) holds only what the command line
adds: the positional argument, a flag named otherwise than its field, a shorter help line, fields left off the
command line, the human-readable summary and the exit code.

`--json` prints the pydantic result for machines; without it, a short readable summary for people.
Exit code 0 on success (for validation: only when the config is valid), 1 on a failed check, 2 on bad input
(the message names the field or file), 3 on an unexpected error (one line; LLM_FINETUNING_DEBUG=1 shows the traceback),
141 when the reader of the output went away (`| head`), quietly.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from mcp_server.errors import UserInputError, describe_failure, validation_message
from mcp_server.interpreter import keep_caches_private
from mcp_server.reporting import silent
from mcp_server.tools import TOOLS
from mcp_server.toolspec import Command, Flag, ToolSpec, print_result
from mcp_server.userfiles import read_json
from mcp_server.worker_targets import DAEMON_TARGETS, DAEMON_WARM_UP


def _progress(args):
    """A long command's progress as lines on stderr, for a person at a terminal (never with --json or when piped)."""
    if args.json or not sys.stderr.isatty():
        return silent
    return lambda done, total, message: print(f"  ... {message}", file=sys.stderr, flush=True)


def _load_json_arg(value: str | None, field: str):
    """A JSON value given inline or as @file.json (a file read like every hand-edited file: userfiles)."""
    if value is None:
        return None
    if value.startswith("@"):
        if not value[1:].strip():
            raise UserInputError(field, "expected @file.json naming a file after the @")
        return read_json(value[1:], field)
    try:
        return json.loads(value)
    except ValueError as exc:
        raise UserInputError(field, f"expected JSON (inline or @file.json): {exc}") from None


# ---------------------------------------------------------------- flags from the request model
def _plain(annotation):
    """The field's type without None and Annotated constraints: `PathText | None` -> str."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _names(kind) -> list | None:
    """The accepted names of a list-of-choices field (`list[Literal[...]]`), else None."""
    if typing.get_origin(kind) is list and (args := typing.get_args(kind)):
        if typing.get_origin(args[0]) is typing.Literal:
            return list(typing.get_args(args[0]))
    return None


def _read_names(value: str, flag: str, accepted: list) -> list:
    """A list of choices as one name, a comma list or JSON (inline or @file.json)."""
    if value.lstrip().startswith(("[", "@")):
        return _load_json_arg(value, flag)
    names = [x.strip() for x in value.split(",") if x.strip()]
    if bad := [x for x in names if x not in accepted]:
        raise UserInputError(flag, f"unknown {', '.join(map(repr, bad))}: accepted {', '.join(accepted)} "
                             "(one name or a comma list)")
    return names


def _takes_json(kind) -> bool:
    """A list, dict, model or union of several types: given as JSON on the command line."""
    origin = typing.get_origin(kind)
    if origin in (list, dict, typing.Union, types.UnionType):
        return True
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _add_field(p: argparse.ArgumentParser, cmd: Command, name: str, info) -> tuple[str, str, str]:
    """Add one field's argument; returns (field, how its value is read: value|json|switch|invert, flag)."""
    spec = cmd.flags.get(name, Flag())
    flag = spec.name or "--" + name.replace("_", "-")
    kind = _plain(info.annotation)
    default = info.default if info.default is not PydanticUndefined and not cmd.whole_request else None
    kw: dict[str, Any] = {"help": spec.help or (info.description or "").replace("%", "%%")}
    read = "value"
    if _names(kind) and not spec.invert:
        kw["help"] += f" One name or a comma list of: {', '.join(_names(kind))}."
    elif _takes_json(kind) and not spec.invert:
        kw["help"] += " As JSON (inline or @file.json)."
    if spec.invert:
        kw["action"], read = "store_true", "invert"
    elif kind is bool:
        kw["action"] = argparse.BooleanOptionalAction if default is None else "store_true"
        read = "value" if default is None else "switch"
    elif typing.get_origin(kind) is typing.Literal:
        choices = list(typing.get_args(kind))
        kw.update(choices=choices, default=default)
        if not isinstance(choices[0], str):
            kw["type"] = type(choices[0])
    elif _names(kind):
        read = "names"
    elif _takes_json(kind):
        read = "json"
    else:
        kw["default"] = default
        if kind in (int, float):
            kw["type"] = kind
    if not flag.startswith("-"):  # positional
        p.add_argument(name, **({"metavar": flag} if flag != name else {}), **{**kw, **spec.argparse})
        return name, read, flag
    kw["dest"] = name
    if spec.name and "action" not in kw:  # a renamed flag shows its own name, not the field's
        kw["metavar"] = flag.lstrip("-").replace("-", "_").upper()
    if info.is_required() and not cmd.whole_request and "default" not in spec.argparse:
        kw["required"] = True
    p.add_argument(flag, **{**kw, **spec.argparse})
    return name, read, flag


def _add_arguments(p: argparse.ArgumentParser, spec: ToolSpec) -> None:
    cmd, fields = spec.cli, []
    if cmd.whole_request:
        p.add_argument("--request", help=cmd.whole_request)
    if model := spec.request:
        if stale := (set(cmd.flags) | set(cmd.hide)) - set(model.model_fields):  # a field renamed in the model
            raise ValueError(f"{spec.command}: {model.__name__} has no field {', '.join(sorted(stale))}")
        fields = [_add_field(p, cmd, name, info) for name, info in model.model_fields.items() if name not in cmd.hide]
    if cmd.extra:
        cmd.extra(p)
    p.add_argument("--json", action="store_true", help=cmd.json_help)
    p.set_defaults(_spec=spec, _fields=fields)


def _request(spec: ToolSpec, args: argparse.Namespace):
    """The request model from the flags: a flag not given leaves the field's default (or --request's value)."""
    cmd = spec.cli
    data = (_load_json_arg(args.request, "--request") or {}) if cmd.whole_request else {}
    if not isinstance(data, dict):
        raise UserInputError("--request", f"expected a JSON object of the request's fields, got {type(data).__name__}")
    for name, read, flag in args._fields:
        value = getattr(args, name)
        if value is None or (value is False and read in ("switch", "invert")):
            continue
        if read == "names":
            value = _read_names(value, flag, _names(_plain(spec.request.model_fields[name].annotation)))
        data[name] = False if read == "invert" else _load_json_arg(value, flag) if read == "json" else value
    if cmd.fold:
        cmd.fold(args, data)
    try:
        return spec.request.model_validate(data)
    except ValidationError as exc:
        raise UserInputError("request", validation_message(exc, spec.request, "request")) from None


def _run(args: argparse.Namespace) -> int:
    spec: ToolSpec = args._spec
    request = _request(spec, args) if spec.request else None
    if spec.cli.handler:
        return spec.cli.handler(args, request)
    kwargs = {"report": _progress(args)} if "report" in inspect.signature(spec.core).parameters else {}
    result = spec.core(request, **kwargs) if request is not None else spec.core(**kwargs)
    print_result(result, args.json, spec.cli.human)
    return 0 if spec.cli.ok(result) else 1


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, the flags of that command alone (what one run needs)."""
    parser = argparse.ArgumentParser(prog="llm-finetuning", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for spec in TOOLS:
        p = sub.add_parser(spec.command, help=spec.cli.help)
        if only in (None, spec.command):
            _add_arguments(p, spec)
    return parser


def _reader_gone() -> int:
    """The output's reader closed it (`llm-finetuning ... | head`): stop quietly, as a command killed by SIGPIPE
    would (exit 141), with what is left unwritten sent nowhere instead of a traceback at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (an in-process caller's buffer)
        pass
    return 141


def _route(python: str, target: str, args: tuple, kwargs: dict, report) -> tuple[bool, object]:
    if target not in DAEMON_TARGETS:
        return False, None
    from mcp_server import worker_daemon

    return worker_daemon.call(python, target, args, kwargs, report, warm_up=DAEMON_WARM_UP)


def main(argv: list[str] | None = None) -> int:
    from mcp_server import worker

    before, worker.route = worker.route, _route
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    finally:
        worker.route = before


def _main(argv: list[str]) -> int:
    keep_caches_private()
    names = {spec.command for spec in TOOLS}
    parser = build_parser(only=next((a for a in argv if a in names), "") if argv else "")
    args = parser.parse_args(argv)
    try:
        code = _run(args)
        sys.stdout.flush()  # here, so a reader that went away (`| head`) is met below, not at interpreter exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except (UserInputError, ValidationError, OSError) as exc:  # bad input, or a file the system refused
        print(f"error: {describe_failure(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: one line, the traceback only on request
        if os.environ.get("LLM_FINETUNING_DEBUG"):
            raise
        print(f"error: {describe_failure(exc)} (set LLM_FINETUNING_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())

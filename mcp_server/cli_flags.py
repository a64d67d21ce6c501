"""The CLI's flags from a tool's request model (see cli.py): a field `max_new_tokens` is the flag
`--max-new-tokens`, typed, defaulted, bounded and described by the field; the request read back from them; and a
flag a command does not take refused with the nearest of its own."""

from __future__ import annotations

import argparse
import json
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from mcp_server.errors import UserInputError, closest_names, validation_message
from mcp_server.toolspec import Command, Flag, ToolSpec
from mcp_server.userfiles import read_json


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


def add_arguments(p: argparse.ArgumentParser, spec: ToolSpec) -> None:
    """The command's arguments: one per request field (less those it hides), its extras, and --json."""
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


def request_from(spec: ToolSpec, args: argparse.Namespace):
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


def refuse_unknown_flags(parser: argparse.ArgumentParser, command: str, args: list[str]) -> None:
    """A flag `command` does not take is refused with the nearest of its own flags (walk 12: `emit-config ... --gpus
    cpu` got argparse's bare "unrecognized arguments: --gpus cpu", no word of --gpu), before argparse reads the
    line: a misspelt required flag then gets the suggestion too, not only "required: --model". A flag is one of the
    command's, or a prefix of exactly one (argparse's abbreviations; an ambiguous prefix is argparse's to name);
    nothing after a bare "--" is a flag."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    flags = [flag for action in sub._actions for flag in action.option_strings if flag.startswith("--")]
    unknown = []
    for arg in args[: args.index("--") if "--" in args else len(args)]:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag != "--" and not any(f.startswith(flag) for f in flags):
            close = closest_names(flag, flags)
            unknown.append(flag + (f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""))
    if unknown:
        sub.error(f"unrecognized arguments: {'; '.join(unknown)}: not {'flags' if len(unknown) > 1 else 'a flag'} "
                  f"of {command} (`llm-finetuning {command} --help` lists them)")


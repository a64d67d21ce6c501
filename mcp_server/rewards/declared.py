"""A registry reward is declared once, by its factory `make_<name>`: what the registry, `list_rewards`, the columns
emission requires and the references show is read from the factory's signature, type hints and docstring (open-r1's
way: a factory's signature is its parameters' one declaration).

- name: the factory's name without `make_`;
- parameters: the signature, in order, with their defaults; each one's type from its hint, written as a spec (JSON)
  writes it (`str | None` is "str | null", a callable a spec cannot write is left out);
- the columns it reads: each parameter typed `Column` (its default is the column's usual name; the spec renames it),
  then the TRL inputs the docstring's `Reads:` line names;
- a parameter typed `WrappedReward` is another reward's spec, built before the factory is called;
- the description: the docstring up to its first section; each parameter's text: its line under `Args:`;
- the example spec: `{name, params, weight 1.0}`, the params being the JSON after `Example:` (none: `{}`);
- the default-parameter reward `mcp_server.rewards.<name>` (a dotted path TRL's CLI takes): when every parameter
  has a default and the factory returns a NamedReward (one named like the registry entry).

Light (stdlib + pydantic): the registry reads every factory at import, and the MCP server imports it at start-up.
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable

from mcp_server.rewards.models import RewardInfo, RewardParam
from mcp_server.rewards.named import NamedReward


class Shown:
    """How a parameter's type reads in `list_rewards` (what a spec writes), when its hint is not that."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Shown({self.text!r})"


Column = Annotated[str, Shown("str")]
"""A data set column the reward reads: the parameter's default is the column's usual name, a spec renames it."""

WrappedReward = Annotated[Callable, Shown("RewardSpec dict")]
"""Another reward, written in the spec as its own spec `{name, params, weight}`; the registry builds it first."""

_SECTION = re.compile(r"^(Reads|Args|Example):[ \t]*(.*)$")


@dataclass(frozen=True)
class Reward:
    """One registry reward, as its factory declares it."""

    factory: Callable[..., Callable]
    info: RewardInfo  # what list_rewards shows
    column_params: dict[str, str]  # parameter -> the data set column it names by default (the `Column` parameters)
    wrapped: tuple[str, ...]  # parameters that are another reward's spec

    @property
    def name(self) -> str:
        return self.info.name


def declared(factory: Callable[..., Callable]) -> Reward:
    """The reward `factory` declares (see the module's docstring); a TypeError names what its declaration lacks."""
    where = f"{factory.__module__}.{factory.__name__}"
    if not factory.__name__.startswith("make_"):
        raise TypeError(f"{where}: a reward factory is named make_<reward name>")
    name = factory.__name__.removeprefix("make_")
    signature = inspect.signature(factory)
    hints = typing.get_type_hints(factory, include_extras=True)
    description, sections = _docstring(factory, where)
    docs = _args(sections.get("Args", ""), where)
    if set(docs) != set(signature.parameters):
        raise TypeError(f"{where}: its docstring's Args: must describe each parameter once: "
                        f"{sorted(set(signature.parameters) ^ set(docs))}")
    params, columns, wrapped = [], {}, []
    for pname, parameter in signature.parameters.items():
        hint = hints.get(pname)
        if hint is None:
            raise TypeError(f"{where}: parameter {pname} has no type hint")
        required = parameter.default is inspect.Parameter.empty
        params.append(RewardParam(name=pname, type=_shown(hint), default=None if required else _jsonable(
            parameter.default), required=required, description=docs[pname]))
        if hint == Column:
            if required:
                raise TypeError(f"{where}: Column parameter {pname} has no default (the column's usual name)")
            columns[pname] = parameter.default
        elif hint == WrappedReward:
            wrapped.append(pname)
    ready = all(not p.required for p in params) and hints.get("return") is NamedReward
    example = json.loads(sections["Example"]) if "Example" in sections else {}
    info = RewardInfo(
        name=name, description=description, columns=[*columns.values(), *sections.get("Reads", "").split()],
        params=params, dotted_path=f"mcp_server.rewards.{name}" if ready else None,
        example={"name": name, "params": example, "weight": 1.0},
    )
    return Reward(factory=factory, info=info, column_params=columns, wrapped=tuple(wrapped))


def _docstring(factory: Callable, where: str) -> tuple[str, dict[str, str]]:
    """(the description, one line; {section: its text}) of a factory's docstring."""
    lines = inspect.cleandoc(factory.__doc__ or "").splitlines()
    head, sections, current = [], {}, None
    for line in lines:
        found = _SECTION.match(line)
        if found:
            current = found.group(1)
            sections[current] = found.group(2)
        elif current is None:
            head.append(line)
        else:
            sections[current] += "\n" + line
    description = " ".join(" ".join(head).split())
    if not description:
        raise TypeError(f"{where}: its docstring says what the reward scores")
    return description, sections


def _args(text: str, where: str) -> dict[str, str]:
    """{parameter: its text} of an `Args:` section: `name: text` at the section's indent, continued deeper."""
    docs: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        found = re.match(r"^ {4}(\w+): (.*)$", line)
        if found:
            current = found.group(1)
            if current in docs:
                raise TypeError(f"{where}: Args: describes {current} twice")
            docs[current] = [found.group(2)]
        elif line.strip() and current is not None:
            docs[current].append(line)
        elif line.strip():
            raise TypeError(f"{where}: Args: line {line.strip()!r} names no parameter (`    name: text`)")
    return {k: " ".join(" ".join(v).split()) for k, v in docs.items()}


def _shown(hint: Any) -> str:
    """The type as a spec (JSON) writes it."""
    if typing.get_origin(hint) is Annotated:
        shown = [m for m in hint.__metadata__ if isinstance(m, Shown)]
        return shown[0].text if shown else _shown(typing.get_args(hint)[0])
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        written = [a for a in typing.get_args(hint) if typing.get_origin(a) is not collections.abc.Callable]
        return " | ".join(_shown(a) for a in written)
    if typing.get_origin(hint) is not None:  # list[str]
        return str(hint)
    return hint.__name__


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)

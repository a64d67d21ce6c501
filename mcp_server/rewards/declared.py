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
- its role and range, from the docstring's `Role:` line (required: a factory without one is refused at import):
  `task` (whether the task was done: the review's success rate, which routes a run to GRPO or to SFT first, counts
  it), `format` (the output's form: a success needs it too) or `shape` (anything else: length, penalties), then
  optionally `, scores LOW to HIGH`, each a number or a numeric parameter's name (its value in the spec, else its
  default), for the review's threshold checks (inspection.success);
- the parameters that follow a config field, from the docstring's `Follows:` line (`PARAM = FIELD`, always that
  field's value, or `PARAM = FRACTION x FIELD`, that share of it unless the spec gives one; comma-separated):
  emission writes them from the final config (`followed`), so a value the config decides (DAPO's L_max is
  max_completion_length) has one owner, the reward's declaration;
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

_SECTION = re.compile(r"^(Reads|Args|Example|Role|Follows):[ \t]*(.*)$")
# `Follows: PARAM = [FRACTION x ]FIELD[, ...]`: a parameter whose value is the config field's (scaled, rounded)
_FOLLOW = re.compile(r"^(\w+)\s*=\s*(?:([\d.]+)\s*x\s*)?(\w+)$")
ROLES = ("task", "format", "shape")
_ROLE = re.compile(r"^(\w+)(?:,\s*scores\s+(-?[\w.]+)\s+to\s+(-?[\w.]+))?\.?$")


@dataclass(frozen=True)
class Reward:
    """One registry reward, as its factory declares it."""

    factory: Callable[..., Callable]
    info: RewardInfo  # what list_rewards shows
    column_params: dict[str, str]  # parameter -> the data set column it names by default (the `Column` parameters)
    wrapped: tuple[str, ...]  # parameters that are another reward's spec
    scores: tuple[str, str] | None = None  # (low, high): a number or a parameter's name; None: not declared
    follows: tuple[tuple[str, float, str], ...] = ()  # (parameter, fraction, config field): the Follows: line

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def role(self) -> str:
        """task | format | shape (the docstring's Role:)."""
        return self.info.role

    def score_range(self, params: dict) -> tuple[float, float] | None:
        """(lowest, highest) score before its weight, for a spec's `params` (a bound naming a parameter reads the
        spec's value, else the factory's default); None when the factory declares none."""
        if self.scores is None:
            return None
        defaults = inspect.signature(self.factory).parameters

        def bound(text: str) -> float:
            sign, name = (-1.0, text[1:]) if text.startswith("-") else (1.0, text)
            if name in defaults:
                return sign * float(params.get(name, defaults[name].default))
            return sign * float(name)

        return bound(self.scores[0]), bound(self.scores[1])

    def followed(self, params: dict, config: dict) -> dict:
        """`params` with each parameter the reward declares as following a config field set from `config`: one
        equal to the field always, one a fraction of it only when `params` does not give it (the fraction is a
        default, the equality a rule). A field the config leaves unset, or not a number, changes nothing."""
        out = dict(params)
        for param, fraction, field in self.follows:
            value = config.get(field)
            if not isinstance(value, int) or isinstance(value, bool) or (fraction != 1 and param in params):
                continue
            out[param] = round(value * fraction) if fraction != 1 else value
        return out


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
    role, scores = _role(sections.get("Role"), signature, where)
    follows = _follows(sections.get("Follows", ""), signature, where)
    ready = all(not p.required for p in params) and hints.get("return") is NamedReward
    example = json.loads(sections["Example"]) if "Example" in sections else {}
    info = RewardInfo(
        name=name, description=description, columns=[*columns.values(), *sections.get("Reads", "").split()],
        params=params, dotted_path=f"mcp_server.rewards.{name}" if ready else None,
        example={"name": name, "params": example, "weight": 1.0}, role=role,
        scores=f"{scores[0]} to {scores[1]}" if scores else None,
    )
    return Reward(factory=factory, info=info, column_params=columns, wrapped=tuple(wrapped), scores=scores,
                  follows=follows)


def _follows(text: str, signature: inspect.Signature, where: str) -> tuple[tuple[str, float, str], ...]:
    """The `Follows:` line as (parameter, fraction, config field) triples; a TypeError names a bad entry."""
    out = []
    for entry in filter(None, (e.strip() for e in " ".join(text.split()).split(","))):
        found = _FOLLOW.match(entry)
        if not found or found.group(1) not in signature.parameters:
            raise TypeError(f"{where}: Follows: entry {entry!r} is not `PARAM = [FRACTION x ]FIELD` for a parameter")
        out.append((found.group(1), float(found.group(2) or 1), found.group(3)))
    return tuple(out)


def _role(text: str | None, signature: inspect.Signature, where: str) -> tuple[str, tuple[str, str] | None]:
    """(role, (low, high) or None) of a `Role:` line; a TypeError names what is missing or wrong."""
    found = _ROLE.match(" ".join((text or "").split()))
    if not found or found.group(1) not in ROLES:
        raise TypeError(f"{where}: its docstring needs a `Role:` line: one of {', '.join(ROLES)}, optionally "
                        f"followed by `, scores LOW to HIGH` (got {text!r})")
    if found.group(2) is None:
        return found.group(1), None
    for bound in found.group(2, 3):
        name = bound.lstrip("-")
        try:
            float(name)
        except ValueError:
            if name not in signature.parameters:
                raise TypeError(f"{where}: Role: bound {bound!r} is neither a number nor a parameter") from None
    return found.group(1), (found.group(2), found.group(3))


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

"""Every upper limit a tool's request declares (m14 #16, issue 48): a string's characters (inputs.PathText, Name,
Note), a path's name bytes (inputs.NAME_MAX, the _path_text check), a number's bound (Field(le=...), lt), as a
table generated from the request models themselves: at the limit accepted, one over refused naming the field and
the limit. A new field, or a new limit, gets its rows without a new test. The wire's own limits (the line, its
colons, a call's argument names, the nesting) are rows of tests/test_server_inputs.py's table.

The request models are what both doors validate (the CLI's flags build one: cli_flags.request_from; MCP's
arguments are one); the rows validate each field alone and read only the errors at that field. Two rows go
through the CLI itself."""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass

import annotated_types as at
import pytest
from pydantic import ValidationError

from mcp_server import inputs
from mcp_server.cli import main
from mcp_server.tools import TOOLS


@dataclass(frozen=True)
class Row:
    tool: str
    field: str
    limit: str  # what is limited: characters, name bytes, value
    value: object
    accepted: bool
    says: str = ""  # what the refusal says (the limit named)

    @property
    def refusals(self) -> tuple[str, ...]:
        """The error types of this limit's refusal (a field may refuse an accepted length for its content, as
        trl_version refuses what is no release number: that is no refusal by the limit)."""
        return {"characters": ("string_too_long",), "name bytes": ("path_name_too_long",),
                "value": ("less_than_equal", "less_than")}[self.limit]


def _metadata(info) -> list:
    """The field's constraints, on the field and inside its (optional) Annotated type."""
    found = list(info.metadata)
    annotation = info.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found += [m for a in typing.get_args(annotation) if typing.get_origin(a) is typing.Annotated
                  for m in a.__metadata__]
    elif typing.get_origin(annotation) is typing.Annotated:
        found += list(annotation.__metadata__)
    return found


def _path(chars: int) -> str:
    """A path of exactly `chars` characters, each name short enough (a name's own limit is not what it tests)."""
    text = (("d" * 99 + "/") * (chars // 100 + 1))[:chars]
    return text[:-1] + "e" if text.endswith("/") else text


def _number(value) -> str:
    """A bound as pydantic's message writes it: 1.0 as 1."""
    return str(int(value)) if float(value).is_integer() else str(value)


def rows_of(tool: str, field: str, info) -> list[Row]:
    rows = []
    for m in _metadata(info):
        if getattr(m, "max_length", None) is not None:  # StringConstraints / MaxLen on a string
            n = m.max_length
            paths = any(getattr(v, "func", None) is inputs._path_text for v in _metadata(info))
            text = _path if paths else (lambda k: "x" * k)
            rows += [Row(tool, field, "characters", text(n), True),
                     Row(tool, field, "characters", text(n + 1), False, f"at most {n} characters")]
        if getattr(m, "func", None) is inputs._path_text:
            n, wide = inputs.NAME_MAX, "\u00e9"  # two bytes in UTF-8: bytes are counted, not characters
            over = f"has a name of {n + 1} bytes"
            rows += [Row(tool, field, "name bytes", "r" * n, True),
                     Row(tool, field, "name bytes", "r" * (n + 1), False, over),
                     Row(tool, field, "name bytes", "runs/" + "r" * n + "/x", True),
                     Row(tool, field, "name bytes", "runs/" + "r" * (n + 1) + "/x", False, over),
                     Row(tool, field, "name bytes", "runs\\" + "r" * (n + 1), False, over),
                     Row(tool, field, "name bytes", wide * (n // 2) + "r" * (n % 2), True),
                     Row(tool, field, "name bytes", wide * ((n + 1) // 2) + "r" * ((n + 1) % 2), False, over)]
        kind = next((a for a in typing.get_args(info.annotation) or (info.annotation,) if a in (int, float)), None)
        if isinstance(m, at.Le):
            above = m.le + 1 if kind is int else math.nextafter(float(m.le), math.inf)
            rows += [Row(tool, field, "value", m.le, True),
                     Row(tool, field, "value", above, False, f"less than or equal to {_number(m.le)}")]
        if isinstance(m, at.Lt):
            below = m.lt - 1 if kind is int else math.nextafter(float(m.lt), -math.inf)
            rows += [Row(tool, field, "value", below, True),
                     Row(tool, field, "value", m.lt, False, f"less than {_number(m.lt)}")]
    return rows


ROWS = [row for spec in TOOLS if spec.request for name, info in spec.request.model_fields.items()
        for row in rows_of(spec.name, name, info)]
MODELS = {spec.name: spec.request for spec in TOOLS if spec.request}


def _errors_at(tool: str, field: str, value) -> list[dict]:
    try:
        MODELS[tool].model_validate({field: value})
    except ValidationError as exc:
        return [e for e in exc.errors() if e["loc"][:1] == (field,)]
    return []


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.tool}.{r.field}-{r.limit}-{'at' if r.accepted else 'over'}-"
                                           f"{len(str(r.value)) if isinstance(r.value, str) else r.value}"
                                           f"-{i}" for i, r in enumerate(ROWS)])
def test_every_declared_limit_accepts_its_limit_and_refuses_one_over_naming_it(row):
    errors = [e for e in _errors_at(row.tool, row.field, row.value) if e["type"] in row.refusals]
    if row.accepted:
        assert errors == [], errors
    else:
        assert errors and all(row.says in e["msg"] for e in errors), errors


def test_the_table_holds_every_kind_of_limit():
    """The generator finds each kind (a name the walk no longer sees would leave its rows out silently)."""
    says = {r.says for r in ROWS if not r.accepted}
    assert {"at most 4096 characters", "at most 256 characters", "at most 20000 characters",
            f"has a name of {inputs.NAME_MAX + 1} bytes"} <= says, says
    assert {r.limit for r in ROWS} == {"characters", "name bytes", "value"}
    assert {r.field for r in ROWS if r.limit == "name bytes"} >= {"run", "config_path", "model", "dataset"}


# ---------------------------------------------------------------- through the CLI
@pytest.mark.parametrize("length, says", [(inputs.NAME_MAX, "no run directory"),
                                          (inputs.NAME_MAX + 1, f"has a name of {inputs.NAME_MAX + 1} bytes")])
def test_the_cli_looks_up_a_name_at_the_limit_and_refuses_one_over(length, says, workspace, capsys):
    try:
        code = main(["check-inspection-gate", "r" * length])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and says in err, err

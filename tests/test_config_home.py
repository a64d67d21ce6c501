"""The GRPO config's one home (mcp_server/config): TRL's default for a field is answered there and nowhere else.

Read from the source (ast), so nothing is imported to check it: a module outside mcp_server/config that writes the
installed TRL's default for a TRL field as a literal default (a class attribute `field: T = <default>`, or a
`.get("field", <default>)`) holds a second copy that drifts when TRL moves. A recipe value that happens to equal
TRL's default (a `"field": value` the recipe chooses, with its reason) is a choice, not a default, and is not read.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mcp_server.config import FIELD, trl_default
from mcp_server.config.grpo_fields import GRPOView

PACKAGE = Path(__file__).resolve().parents[1] / "mcp_server"
HOME = PACKAGE / "config"
# Literal defaults that say nothing about TRL (None, False, True, 0, 1, "", an empty container): too common to be a
# copy of TRL's table, and a field defaulting to one of them is not "TRL's number" written twice.
TRIVIAL = (None, False, True, 0, 1, "", 0.0, 1.0)


def _is_copy(name: str, node: ast.AST) -> bool:
    if name not in GRPOView.DEFAULTS or not isinstance(node, ast.Constant):
        return False
    default = GRPOView.DEFAULTS[name]
    if any(node.value == t and type(node.value) is type(t) for t in TRIVIAL):
        return False
    return type(node.value) is type(default) and node.value == default


def literal_defaults(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if _is_copy(node.target.id, node.value):
                found.append((node.lineno, node.target.id))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "get", "setdefault", "pop") and len(node.args) == 2 and isinstance(node.args[0], ast.Constant):
            if isinstance(node.args[0].value, str) and _is_copy(node.args[0].value, node.args[1]):
                found.append((node.lineno, node.args[0].value))
    return found


def test_no_trl_default_written_outside_the_config_home():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if HOME in path.parents:
            continue
        for line, name in literal_defaults(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line} {name}")
    assert not offenders, ("TRL defaults written as literals (read mcp_server.config.trl_default instead):\n"
                           + "\n".join(offenders))


def test_the_scan_finds_a_copied_default():
    """The scan is not vacuous: each of the two shapes, with TRL's own default, is found."""
    value = trl_default("max_completion_length")
    source = (f"class S:\n    max_completion_length: int = {value}\n"
              f"x = config.get('max_completion_length', {value})\n")
    assert [name for _, name in literal_defaults(ast.parse(source))] == ["max_completion_length"] * 2


def test_trl_default_answers_from_the_generated_table_and_refuses_unknown_names():
    assert trl_default("num_generations") == GRPOView.DEFAULTS["num_generations"]
    try:
        trl_default("max_prompt_lenght")
    except KeyError as error:
        assert "max_prompt_lenght" in str(error)
    else:
        raise AssertionError("an unknown field must raise")


# ---------------------------------------------------------------- max_completion_length named in few modules
LENGTH = "max_completion_length"
# Issue 35's target is at most 5 modules. A module names the field through config.FIELD (checked against TRL's field
# table) and reads its value through a typed view (config.GRPOView, config.recipe.Recipe); each new module that spells
# it is refused here. Left: the trainer template (emitted byte for byte into every run, it imports nothing of ours),
# the demos, and config/fields.py, the field metadata's declaration (each name there is held to TRL's table by
# tests/test_config_view.py).
LENGTH_MODULES = {"demo_agentic.py", "demo_smollm2.py", "training/trainer/train_agentic_template.py",
                  "config/fields.py"}


def literal_names(tree: ast.AST, name: str) -> int:
    """How many times `name` is written as a whole string literal (a dict key, a .get argument, a finding's field)."""
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value == name)


def modules_naming(name: str, package: Path = PACKAGE) -> set[str]:
    return {path.relative_to(package).as_posix() for path in sorted(package.rglob("*.py"))
            if literal_names(ast.parse(path.read_text(encoding="utf-8")), name)}


def test_max_completion_length_is_a_literal_in_no_new_module():
    found = modules_naming(LENGTH)
    assert found <= LENGTH_MODULES, (f"{LENGTH} written as a string literal in {sorted(found - LENGTH_MODULES)}: "
                                     "read it through a typed view (config.GRPOView, config.recipe.Recipe) instead")
    assert len(found) <= len(LENGTH_MODULES)


def test_the_length_scan_finds_a_planted_literal(tmp_path):
    """The scan is not vacuous: a module that reads the field by its string is found, one that reads it by
    attribute or names it inside a longer text is not."""
    (tmp_path / "planted.py").write_text(f"limit = config.get({LENGTH!r}, 0)\n")
    (tmp_path / "typed.py").write_text(f"limit = GRPOView(config).{LENGTH}\nkey = FIELD.{LENGTH}\n"
                                       f"note = 'the {LENGTH} of the run'\n")
    assert modules_naming(LENGTH, tmp_path) == {"planted.py"}


def test_a_field_is_named_through_the_checked_namespace():
    """config.FIELD spells a TRL field as TRL does, and refuses a name TRL's table does not hold, so a typo or a field
    TRL renamed fails where it is written instead of silently never matching a config's key."""
    assert FIELD.max_completion_length == LENGTH
    assert all(getattr(FIELD, name) == name for name in GRPOView.DEFAULTS)
    with pytest.raises(AttributeError, match="max_completion_lenght"):
        FIELD.max_completion_lenght  # the misspelt name is the point
    with pytest.raises(AttributeError, match="max_prompt_length"):  # removed in TRL 1.0
        FIELD.max_prompt_length


def test_the_training_world_is_decided_in_one_place():
    """Issue 46: the training world (TRL's world size: the GPUs less the run's own vLLM server's) is decided by
    config.target.Target alone; validation, the launcher and the memory planner (RunSettings.training_processes,
    which called config.batches.training_world itself) ask it."""
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name == "training_world":
                    callers.append(path.relative_to(PACKAGE).as_posix())
    assert callers == ["config/target.py"], callers

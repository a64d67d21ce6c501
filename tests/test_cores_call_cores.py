"""Cores call cores (issue 35): a tool's request model is what its door parses, never how one core calls another.
Outside the doors floor (tests/support.py FLOORS "doors": the CLI, the server, the demos) a tool's request
model (the `request=` of a ToolSpec in some tools.py) is constructed only inside its own package: the one that
defines it or registers its tool. A core that needs another tool's answer calls that package's domain function
(memory.planner.plan / architecture_of, memory.verdict.validate_file, ...) with plain typed arguments.
Read from the source (ast): nothing is imported to check it."""

from __future__ import annotations

import ast
from pathlib import Path

from support import FLOORS, PACKAGE, floor_of, module_name, package_of

DOORS = next(number for number, (name, _) in enumerate(FLOORS) if name == "doors")


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def tool_request_models() -> dict[str, set[str]]:
    """name of each tool's request model -> the packages allowed to construct it (definer and registrar)."""
    defined: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, package_of(module_name(path)))
    owners: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("tools.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.keyword) and node.arg == "request" and isinstance(node.value, ast.Name):
                name = node.value.id
                owners.setdefault(name, {defined.get(name, "")}).add(package_of(module_name(path)))
    return owners


def constructions() -> list[tuple[str, int, str, set[str]]]:
    """(module, line, model, its own packages) for each construction of a tool's request model by a core."""
    owners = tool_request_models()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if floor_of(module) == DOORS:
            continue
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in owners:
                found.append((module, node.lineno, name, owners[name]))
    return found


def test_the_request_models_are_found():
    owners = tool_request_models()
    # the check reads the registry: a rename that hid every model from it would pass vacuously
    assert {"MemoryPlanRequest", "ValidateRequest", "GRPORecipeRequest", "LaunchRequest"} <= set(owners)
    assert {"mcp_server.recipe", "mcp_server.memory"} <= owners["ValidateRequest"]  # defined / registered


def test_no_core_constructs_another_tools_request_model():
    foreign = [f"{module}:{line} builds {name} (its packages: {', '.join(sorted(own))})"
               for module, line, name, own in constructions() if package_of(module) not in own]
    assert not foreign, "call the owning package's domain function instead:\n" + "\n".join(foreign)


def test_no_module_builds_a_memory_plan_request():
    """Issue 46: the planner's cores take the run (RunSpec) and its PlanOptions; a MemoryPlanRequest is what
    plan_memory's door receives and reads (planner.request_spec, request_options), and no module builds one
    (memory.planner.plan and the step estimate each built one to re-enter the planner)."""
    built = [f"{module}:{line}" for module, line, name, _ in constructions() if name == "MemoryPlanRequest"]
    assert not built, built

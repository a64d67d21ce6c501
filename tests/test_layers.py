"""The package's floors (docs/architecture.md, "Floors"): every import, at module top or inside a function, and
every worker target named as a string ("module:function", declared in mcp_server/worker_targets.py and counted
where a module imports it), points to the same floor or one below; no two packages import each other, directly or
around a loop. The floors are declared once, in tests/support.py (`FLOORS`, which test_cores_call_cores.py reads
too). Read from the source (ast), so nothing is imported to check it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from support import FLOORS, PACKAGE, floor_of, module_name, package_of

TABLE = PACKAGE / "worker_targets.py"  # the one table of worker targets


def worker_targets(tree: ast.AST) -> list[tuple[str, str, int]]:
    """(module, function, line) for every 'mcp_server.x:function' string: what in_training(...) will import."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("mcp_server."):
            module, colon, function = node.value.partition(":")
            if colon and module.replace(".", "").replace("_", "").isalnum():
                found.append((module, function, node.lineno))
    return found


@functools.cache
def table() -> dict[str, list[tuple[str, str]]]:
    """{name in worker_targets: [(module, function)]}: a name bound to other names (a set of them) expands."""
    named: dict[str, list[tuple[str, str]]] = {}
    for node in ast.parse(TABLE.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found = [(module, function) for module, function, _ in worker_targets(node.value)]
            for ref in ast.walk(node.value):
                if isinstance(ref, ast.Name) and ref.id in named:
                    found += named[ref.id]
            named[node.targets[0].id] = found
    return named


def imports(path: Path, module: str) -> list[tuple[str, int]]:
    """(imported mcp_server module, line) for every import in the file, top level and inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.startswith("mcp_server")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("mcp_server"):
                continue
            if base == "mcp_server.worker_targets":  # a declared target: an import of the module it names
                found += [(target, node.lineno) for alias in node.names for target, _ in table().get(alias.name, [])]
            for alias in node.names:  # `from mcp_server import x` may import a submodule
                sub = f"{base}.{alias.name}"
                found.append((sub if (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists()
                              or (PACKAGE.parent / sub.replace(".", "/")).is_dir() else base, node.lineno))
    if path != TABLE:  # the table's own strings count where they are used
        found += [(target, line) for target, _, line in worker_targets(tree)]
    return sorted(set(found), key=lambda item: item[1])


@functools.cache
def graph() -> dict[str, list[tuple[str, int]]]:
    return {module_name(p): imports(p, module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_is_on_a_floor():
    for module in graph():
        floor_of(module)


def test_no_arrow_points_up():
    upward = []
    for module, targets in graph().items():
        for target, line in targets:
            if floor_of(target) > floor_of(module):
                upward.append(f"{module}:{line} imports {target} "
                              f"({FLOORS[floor_of(module)][0]} -> {FLOORS[floor_of(target)][0]})")
    assert not upward, "imports from a lower floor to a higher one:\n" + "\n".join(upward)


def cycles_in(edges: dict[str, set[str]]) -> list[str]:
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_cycle_between_packages():
    edges: dict[str, set[str]] = {}
    for module, targets in graph().items():
        for target, _ in targets:
            if package_of(target) != package_of(module):
                edges.setdefault(package_of(module), set()).add(package_of(target))
    cycles = cycles_in(edges)
    assert not cycles, "packages that import each other:\n" + "\n".join(cycles)


def test_no_cycle_between_modules():
    edges = {module: {target for target, _ in targets if target != module} for module, targets in graph().items()}
    cycles = cycles_in(edges)
    assert not cycles, "modules that import each other:\n" + "\n".join(cycles)


def test_worker_calls_name_a_declared_target():
    """in_training(...) takes a name from worker_targets, never a string written at the call, and every declared
    target is used (the table stays the list of what crosses to the worker)."""
    literal, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "in_training"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                literal.append(f"{module_name(path)}:{node.lineno} calls in_training({node.args[0].value!r})")
            if isinstance(node, ast.ImportFrom) and node.module == "mcp_server.worker_targets":
                used |= {alias.name for alias in node.names}
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "worker_targets"):  # `from mcp_server import worker_targets` (worker.py)
                used.add(node.attr)
    assert not literal, "declare these targets in mcp_server/worker_targets.py:\n" + "\n".join(literal)
    unused = {name for name in table() if not any(set(table()[name]) <= set(table()[u]) for u in used)}
    assert not unused, f"worker_targets declares targets nothing calls: {sorted(unused)}"


def test_worker_targets_exist():
    """Every in_training("module:function") names a module that defines that function (moves must follow)."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, function, line in worker_targets(ast.parse(path.read_text(encoding="utf-8"))):
            file = PACKAGE.parent / (module.replace(".", "/") + ".py")
            if not file.is_file():
                file = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
            top = function.split(".")[0]
            defined = file.is_file() and any(
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == top
                for node in ast.parse(file.read_text(encoding="utf-8")).body)
            if not defined:
                missing.append(f"{module_name(path)}:{line} names {module}:{function}, which does not exist")
    assert not missing, "\n".join(missing)


def test_the_check_sees_an_upward_arrow(tmp_path):
    """The walk is not vacuous: a function-level import of a higher floor is found."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from mcp_server.training.launch import launch_training\n"
                      "    from mcp_server.worker_targets import PROBE_INTERPRETER\n")
    assert ("mcp_server.training.launch", 2) in imports(source, "mcp_server.runs")
    assert ("mcp_server.training.environment", 3) in imports(source, "mcp_server.runs")  # a worker target's module
    assert floor_of("mcp_server.training.launch") > floor_of("mcp_server.runs")

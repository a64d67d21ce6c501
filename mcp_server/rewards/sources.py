"""The source a user reward runs: its module and every local module that module imports, followed through
their own imports. "Local" means not part of the interpreter's installation (stdlib, site-packages): a helper
beside the reward, a package in the project. Those can change a score without a line of the reward module
changing, so the inspection gate's reward hash covers them (rewards.registry.reward_code_sha256). Followed: import
statements, import_module/__import__ calls with a literal name, and what importing the module actually loaded
(IMPORTED, recorded by rewards.dotted; its module globals), so a name computed at import time is followed too.
A module is hashed whatever its file is (issue 48, round 15 G1: a C extension helper, fastk.so, rebuilt after the
verdict): its bytes, and, where this process ran other bytes from that file than it holds now (source_only.EXECUTED:
a module that rewrote its own file at import, round 15 G4), the bytes that ran too (MOVED names the file)."""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.interpreter import user_code_allowed
from mcp_server.rewards.source_only import (  # noqa: F401 (installed_roots: its home was here)
    executed,
    installed_roots,
    zip_refusal,
)


# What importing each user module actually loaded (sys.modules before and after: rewards.dotted records it): a
# module imported by a name computed at import time (`importlib.import_module("hel" + "per")`) that no import
# statement names (issue 48).
IMPORTED: dict[str, tuple[str, ...]] = {}


def record_import(name: str, before: set[str]) -> None:
    """Keep what the import of `name` loaded (the modules now in sys.modules that were not in `before`), other
    than this package's own (imported as installed, never a reward's code); an import again (a worker's call after
    its files changed: source_only.forget_changed) replaces what the earlier one loaded."""
    IMPORTED[name] = tuple(sorted(m for m in set(sys.modules) - before
                                  if m != name and m.split(".")[0] != "mcp_server"))


def _dynamic_names(node: ast.AST) -> list[str]:
    """`importlib.import_module("x")` / `__import__("x")` / `import_module(".x", "pkg")` with literal names."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return []
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    name = node.args[0].value
    if called not in ("import_module", "__import__") or not isinstance(name, str):
        return []
    anchor = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
    if name.startswith(".") and isinstance(anchor, str):
        try:
            name = importlib.util.resolve_name(name, anchor)
        except (ImportError, ValueError):
            return []
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _imported_names(tree: ast.AST, package: str | None) -> list[str]:
    """Module names an import statement (or a call of import_module / __import__ with a literal name) may load
    (a `from pkg import x` may load the submodule pkg.x)."""
    names = []
    for node in ast.walk(tree):
        names += _dynamic_names(node)
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                names += [".".join(parts[: i + 1]) for i in range(len(parts))]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                try:
                    base = importlib.util.resolve_name("." * node.level + base, package)
                except (ImportError, ValueError):
                    continue
            if base:
                names.append(base)
                names += [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    return names


def static_spec(name: str):
    """The module spec of `name` found on disk without running any code: importlib.util.find_spec imports the
    parent packages of a dotted name (their __init__.py runs); this walks sys.path (and the working directory, as
    `trl grpo` adds it) and each package's folder instead. None when not found."""
    if name in sys.modules:
        return getattr(sys.modules[name], "__spec__", None)
    path, parts, spec = [*sys.path, os.getcwd()], name.split("."), None
    for i in range(len(parts)):
        try:
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), path)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    return spec


def _origin(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name) if user_code_allowed() else static_spec(name)
    except (ImportError, ValueError, AttributeError):  # not a module (an attribute), or a broken parent
        return None
    origin = getattr(spec, "origin", None) if spec else None
    if not isinstance(origin, str) or not getattr(spec, "has_location", False):
        return None  # built-in, frozen, a namespace package
    path = Path(origin).resolve()
    if not path.is_file():  # a module from a zip archive on sys.path (zipimport): no file to pin or copy
        archive = next((str(p) for p in path.parents if p.is_file()), None)
        if archive:
            raise UserInputError("rewards", zip_refusal(name, archive))
        raise UserInputError("rewards", f"module {name!r} is imported from {origin}, which is no file: a review "
                             "pins and copies reward code as files; put its .py file in the workspace and review "
                             "again")
    return path


# Files whose bytes that ran in this process are not the bytes they hold now (local_sources found them)
MOVED: dict[str, str] = {}


def local_sources(module_name: str) -> list[tuple[str, bytes]]:
    """(module name, source bytes) of the module and the local modules it imports, sorted by name."""
    installed = installed_roots()
    found: dict[str, bytes] = {}
    stack = [module_name]
    while stack:
        name = stack.pop()
        if name in found:
            continue
        path = _origin(name)
        if path is None or any(path.is_relative_to(root) for root in installed):
            continue
        source = path.read_bytes()
        found[name] = source
        ran = executed(path)
        if ran is not None and ran != hashlib.sha256(source).hexdigest():
            found[f"{name} (as it ran)"] = ran.encode()  # never the hash of what the file holds now
            MOVED[str(path)] = f"{path}: the bytes this process ran (sha256 {ran[:12]}) are not what it holds now"
        else:
            MOVED.pop(str(path), None)
        is_package = path.name.startswith("__init__.")
        if path.suffix != ".py":  # an extension module: its bytes are hashed, its imports are what loaded
            stack += [*IMPORTED.get(name, ())]
            continue
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        stack += _imported_names(tree, name if is_package else name.rpartition(".")[0])
        if name.split(".")[0] != "mcp_server":  # this package's globals grow as it imports lazily: the walk of
            stack += [*IMPORTED.get(name, ()), *_module_globals(name)]  # its modules stays the static one
    return sorted(found.items())


def _module_globals(name: str) -> list[str]:
    """The modules an imported module holds as globals (`helper = importlib.import_module(name)`), however their
    names were computed."""
    module = sys.modules.get(name)
    return [value.__name__ for value in list(vars(module).values()) if isinstance(value, type(sys))
            and isinstance(getattr(value, "__name__", None), str)] if module is not None else []


def local_files(module_name: str) -> dict[str, bytes]:
    """The files of local_sources(module_name) as paths relative to the directory they import from
    ('pkg/helper.py' for pkg.helper), with the __init__.py of each package on the way, so a copy of them beside
    nothing else imports the same bytes (inspection.trained: the reward code a verdict reviewed, kept in the run).
    This package's own modules are left out: the trainer imports them as installed."""
    files: dict[str, bytes] = {}
    for name, source in local_sources(module_name):
        if name.split(".")[0] in ("mcp_server", "__main__") or " " in name:  # " (as it ran)": no file
            continue
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            path = _origin(".".join(parts[:depth]))
            if path is None:  # a namespace package: its directory is enough
                continue
            package = path.name.startswith("__init__.")
            relative = "/".join([*parts[:depth - 1], *([parts[depth - 1], path.name] if package else [path.name])])
            files[relative] = source if depth == len(parts) else path.read_bytes()
    return files


def local_file_pins(module_name: str) -> dict[str, str]:
    """path -> sha256 of each file of local_sources(module_name) (any suffix), and of the bytes that ran from it
    where they differ ('<path> (as it ran)'): what a baseline keeps of its graders' code, so a refusal can name the
    file that differs (issue 48, round 15 F1)."""
    pins = {}
    for name, source in local_sources(module_name):
        if name.split(".")[0] == "mcp_server":
            continue
        base, _, ran = name.partition(" ")
        path = _origin(base)
        if path is not None:
            pins[f"{path} {ran}".strip()] = source.decode() if ran else hashlib.sha256(source).hexdigest()
    return pins


def file_pin_changes(pins) -> list[str]:
    """A line per file of `pins` (local_file_pins) that is not what it was, or whose bytes that ran in this process
    are not what it holds (MOVED)."""
    said = []
    for key, sha in (pins.items() if isinstance(pins, dict) else []):
        path = Path(str(key))
        if str(key).endswith(")") or not isinstance(sha, str):
            continue
        try:
            now = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            now = "unreadable or absent"
        if now != sha:
            said.append(f"{path}: sha256 {sha[:12]} then, {now[:12]} now")
    return said + [line for line in MOVED.values() if line not in said]

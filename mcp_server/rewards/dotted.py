"""Importing a function named by a dotted path (a reward, a judge), the way `trl grpo --reward_funcs` does; in the
read-only mode (interpreter.user_code_allowed), finding it on disk instead, without running the module."""

from __future__ import annotations

import ast
import contextlib
import linecache
import os
import sys
from pathlib import Path
from typing import Callable

from mcp_server.errors import UserInputError, closest_names, did_you_mean
from mcp_server.interpreter import user_code_allowed
from mcp_server.rewards.reads import importing
from mcp_server.rewards.source_only import import_user
from mcp_server.rewards.sources import record_import, static_spec


class RewardImportError(UserInputError):
    """A reward's module cannot be imported from where this process looks (`looked_in`): the fix is the import
    path (the directory the command runs from, PYTHONPATH), not the reward or its review."""

    def __init__(self, field: str, message: str, fix: str):
        self.fix = fix
        super().__init__(field, f"{message}; {fix}")


def import_dirs(*folders: Path | str, last: Path | str | None = None) -> None:
    """Put `folders` first on sys.path (in order) and `last` at its end, each once: where a run's custom rewards
    are imported from whatever directory a command runs in."""
    for folder in reversed([str(f) for f in folders]):
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
    if last is not None and str(last) not in sys.path:
        sys.path.append(str(last))


@contextlib.contextmanager
def on_path(folders: list[str]):
    """`folders` (another process's looked_in: the keyless worker's caller) first on sys.path for a call, sys.path
    as it was after it: the worker imports user code from where its caller would have."""
    saved = list(sys.path)
    import_dirs(*folders)
    try:
        yield
    finally:
        sys.path[:] = saved


def looked_in() -> list[str]:
    """The user directories on sys.path (not the interpreter's own or its installed packages), as looked in."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    seen, out = set(), []
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        installed = any(real == p or real.startswith(p + os.sep) for p in prefixes) or "-packages" in real
        if real in seen or not os.path.isdir(real) or installed:
            continue
        seen.add(real)
        out.append(real)
    return out


def import_dotted(path: str, field: str) -> Callable:
    """A function named by a dotted path, imported the way `trl grpo --reward_funcs` does (cwd on sys.path); in the
    read-only mode an `Unimported` stand-in for it, found on disk."""
    module_path, _, attr = path.rpartition(".")
    if not user_code_allowed():
        return find_dotted(path, field)
    before = set(sys.modules)
    try:
        try:
            with importing(module_path):  # what its module-level code opens (rewards.reads)
                module = import_user(module_path)
        except ModuleNotFoundError:
            if os.getcwd() in sys.path:
                raise
            sys.path.insert(0, os.getcwd())
            with importing(module_path):
                module = import_user(module_path)
    except ModuleNotFoundError as exc:  # the module (or one it imports) is not where this process looks
        top = (exc.name or module_path).split(".")[0]
        where = ", ".join(looked_in()) or "no user directory"
        near = nearest_rewards(path)
        raise RewardImportError(
            field, f"cannot import module '{module_path}' for reward '{path}': {exc} (looked in {where}, then the "
            "installed packages)",
            (f"did you mean {' or '.join(repr(n) for n in near)} (a function in the workspace)? Else " if near
             else "to fix: ") + f"run the command from the directory that holds {top}.py (or the {top}/ package), "
            "or add that directory to PYTHONPATH") from None
    except Exception as exc:  # any other import failure is the user's module
        raise UserInputError(field, f"cannot import module '{module_path}' for reward '{path}': {exc}") from None
    if module_path not in before:  # what this import loaded, by whatever name (the reward-code hash follows it)
        record_import(module_path, before)
    func = getattr(module, attr, None)
    if func is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        near = [f"{module_path}.{n}" for n in closest_names(attr, public)]
        raise UserInputError(
            field, f"module '{module_path}' has no '{attr}';{did_you_mean(near)} Its callables: "
                   f"{', '.join(public[:20]) or 'none'}"
        )
    if not callable(func):
        raise UserInputError(field, f"'{path}' is not callable; a reward takes (completions, **columns) -> list[float]")
    return func


class Unimported:
    """A module-level name of a user module, found in its source and never imported (the read-only mode runs no
    user code). It carries what the reward-code hash reads of a function (`__module__`, `__qualname__`, the
    module's source); calling it is refused."""

    def __init__(self, module: str, attr: str, file: Path):
        self.__module__, self.__qualname__, self.__name__, self.file = module, attr, attr, file

    def source(self) -> str:
        """The module's source as inspect.getsource reads an imported module's (through linecache)."""
        return "".join(linecache.getlines(str(self.file)))

    def __call__(self, *args, **kwargs):
        raise UserInputError("rewards", f"{self.__module__}.{self.__qualname__} was not imported: the read-only "
                             "server runs no user code")


def _defines(tree: ast.Module, attr: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == attr for alias in node.names):
                return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
            return True
    return False


def find_dotted(path: str, field: str) -> Unimported:
    """The module-level name a dotted path names, found in its module's source without running it."""
    module_path, _, attr = path.rpartition(".")
    spec = static_spec(module_path) if module_path else None
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        raise UserInputError(field, f"cannot find module '{module_path}' for reward '{path}' (the read-only server "
                             "looks for its source and imports nothing)")
    try:
        tree = ast.parse(Path(origin).read_bytes())
    except (OSError, SyntaxError, ValueError) as exc:
        raise UserInputError(field, f"cannot read module '{module_path}' for reward '{path}': {exc}") from None
    if not _defines(tree, attr):
        raise UserInputError(field, f"module '{module_path}' ({origin}) defines no '{attr}' at its top level")
    return Unimported(module_path, attr, Path(origin))


def _local_modules(limit: int = 200):
    """(module name, parsed source) of each top-level module (*.py) in the workspace and the current directory,
    read without running it."""
    from mcp_server.workspace import workspace_root

    seen = set()
    for folder in dict.fromkeys([workspace_root(), Path.cwd().resolve()]):
        try:
            files = sorted(folder.glob("*.py"))[:limit]
        except OSError:
            continue
        for file in files:
            if file.stem in seen or not file.stem.isidentifier() or not file.is_file():
                continue
            seen.add(file.stem)
            try:
                if file.stat().st_size > 1_000_000:
                    continue
                tree = ast.parse(file.read_bytes())
            except (OSError, SyntaxError, ValueError):
                continue
            yield file.stem, tree


def local_definitions(attr: str, limit: int = 200) -> list[str]:
    """`module.attr` for each top-level module (*.py) in the workspace and the current directory that defines
    `attr` at its top level, read without running it: what a bare name that is no registry reward most likely
    meant (the user's own reward beside their data)."""
    return [f"{module}.{attr}" for module, tree in _local_modules(limit) if _defines(tree, attr)]


def local_functions(limit: int = 200) -> list[str]:
    """`module.function` for every public top-level function of the workspace's modules (read, never run)."""
    return [f"{module}.{node.name}" for module, tree in _local_modules(limit) for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_")]


def nearest_rewards(path: str, others=()) -> list[str]:
    """The workspace's `module.function` names (and `others`: TRL's reward names, say) closest to a misspelt
    dotted path, best first (errors.closest_names: difflib): issue 49's "did you mean unit_rewards.cm_reward"."""
    return closest_names(path, [*local_functions(), *others])


# What TRL's GRPOTrainer passes every reward besides the data columns (_calculate_rewards): the generations, the
# trainer's state and logging hooks, the environments of an agentic run. The `prompt` column is not passed by name.
TRL_INPUTS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
                        "environments"})


def required_columns(path: str, dirs=()) -> list[str] | None:
    """The data columns a dotted-path reward cannot run without: its parameters with no default that TRL does not
    supply itself (TRL passes each column as the keyword argument of the column's name). Read from its module's
    source (found where an import would look, else in `dirs`), never imported; None when that source does not show
    it (not found, not a plain top-level function, a decorator that may change its signature)."""
    module_path, _, attr = path.rpartition(".")
    if not module_path:
        return None
    origin = getattr(static_spec(module_path), "origin", None) or next(
        (str(f) for d in dirs if (f := Path(d, *module_path.split(".")).with_suffix(".py")).is_file()), None)
    if not origin or not origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(origin).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    binding = [n for n in tree.body if _defines(ast.Module(body=[n], type_ignores=[]), attr)]
    func = binding[-1] if binding else None  # the module's last binding of the name is the one imported
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.decorator_list:
        return None
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    without_default = positional[:len(positional) - len(args.defaults)]
    without_default += [a for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    return [a.arg for a in without_default if a.arg not in TRL_INPUTS]

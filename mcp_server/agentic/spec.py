"""Where a run's environment and tools come from, and loading them as TRL will call them.

A run names them by dotted path (`package.module:Name` or `package.module.Name`), importable from
`source_root` (recorded absolute in train/agentic.json). Loading always re-imports the modules under that
root, so an edited file is read afresh by a long-lived worker. Every call TRL makes into them (the
environment's constructor, `reset`, each tool) goes through `timed`, which cuts off a call that hangs after
`timeout_s` with a TimeoutError that TRL records against that trajectory.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
from pathlib import Path

from pydantic import BaseModel, Field

from mcp_server.errors import UserInputError, one_line, short
from mcp_server.rewards.source_only import import_user
from mcp_server.rewards.sources import local_sources

DEFAULT_TIMEOUT_S = 30.0


class AgenticRecord(BaseModel):
    """train/agentic.json: what train.py hands TRL besides the rewards."""

    environment: str | None = Field(default=None, description="Dotted path of the environment class.")
    tools: list[str] = Field(default_factory=list, description="Dotted paths of standalone tool functions.")
    source_root: str = Field(description="The directory the dotted paths import from (absolute).")
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, description="Limit on each environment or tool call.")


def split_path(text: str, field: str) -> tuple[str, str]:
    """('package.module', 'Name') from 'package.module:Name' or 'package.module.Name'."""
    module, colon, name = text.partition(":") if ":" in text else text.rpartition(".")
    parts = [*module.split("."), name]
    if not module or not name or not all(p.isidentifier() for p in parts):
        raise UserInputError(field, f"{short(text)!r} is not a dotted path; give 'package.module:Name' or "
                                    "'package.module.Name'")
    return module, name


def _fresh_import(module: str, root: Path):
    """Import `module` with `root` first on sys.path, dropping the cached copies of it and of the local modules it
    imports (so an edit is seen). Only those: other modules loaded from under `root` belong to whoever loaded
    them (a test session's conftest, a reward's helpers)."""
    root = root.resolve()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        stale = [name for name, _ in local_sources(module)] or [module]
    except Exception:  # noqa: BLE001 - a broken parent package: the import below names the error
        stale = [module]
    for name in stale:
        if name.split(".")[0] not in ("mcp_server", "__main__"):
            sys.modules.pop(name, None)
    importlib.invalidate_caches()
    return import_user(module)


def resolve(text: str, root: Path, field: str):
    """The object a dotted path names, imported from `root`; one line naming the field on any failure."""
    module, name = split_path(text, field)
    try:
        mod = _fresh_import(module, root)
    except Exception as exc:  # noqa: BLE001 - a user's module can raise anything while importing
        raise UserInputError(field, f"cannot import {module} from {root}: {type(exc).__name__}: "
                                    f"{one_line(short(exc))}") from None
    if not hasattr(mod, name):
        raise UserInputError(field, f"{module} (from {mod.__file__}) has no {name}")
    return getattr(mod, name)


def find_root(text: str, candidates: list[Path], field: str) -> Path:
    """The first of `candidates` the dotted path's module is found under."""
    module, _ = split_path(text, field)
    top = module.split(".")[0]
    for root in candidates:
        if (root / f"{top}.py").is_file() or (root / top / "__init__.py").is_file() or (root / top).is_dir():
            return root.resolve()
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        origin = Path(spec.origin)
        return (origin.parents[1] if origin.name == "__init__.py" else origin.parent).resolve()
    raise UserInputError(field, f"no module {top!r} under {', '.join(str(c) for c in candidates)} or on sys.path")


def timed(fn, timeout_s: float, label: str):
    """`fn` wrapped so a call that runs past `timeout_s` raises TimeoutError (the stuck thread is abandoned as a
    daemon). Name, docstring, annotations and signature are kept: TRL builds the tool schema from them. An async
    function is returned as is: TRL awaits it on its own loop."""
    if inspect.iscoroutinefunction(fn):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        box: dict = {}

        def target():
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=target, daemon=True, name=f"agentic-{label}")
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            raise TimeoutError(f"{label} did not return within {timeout_s:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    return call


def public_methods(cls) -> list[str]:
    """The methods TRL exposes as tools: public functions on the class, except reset and get_reward."""
    return [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


def timed_environment(cls, timeout_s: float):
    """A subclass of `cls` whose constructor, reset, get_reward and tools run under `timed` (TRL inspects the class
    for its functions, so the wrappers are defined on it)."""
    names = [name for name in [*public_methods(cls), "reset", "get_reward"]
             if inspect.isfunction(getattr(cls, name, None))]
    members = {name: timed(getattr(cls, name), timeout_s, f"{cls.__name__}.{name}") for name in names}
    timed_init = timed(cls.__init__, timeout_s, f"{cls.__name__}()")
    members["__init__"] = lambda self, *a, **k: timed_init(self, *a, **k)
    if "reset" in members:
        members["reset"] = _naming_the_row(members["reset"])
    return type(cls.__name__, (cls,), {**members, "__module__": cls.__module__, "__doc__": cls.__doc__})


def _naming_the_row(reset):
    """`reset` whose exception carries the row it was given (`reset_row`, a note for the training log): TRL calls
    reset outside any try, so a raising reset fails the whole batch; the row is what the user needs to find."""
    @functools.wraps(reset)
    def call(self, *args, **row):
        try:
            return reset(self, *args, **row)
        except Exception as exc:
            exc.reset_row = row
            exc.add_note(f"raised by reset on the data set row {short(row)}")
            raise

    return call


def load(record: AgenticRecord) -> tuple[object | None, list]:
    """(environment_factory, tools) for GRPOTrainer, every call under the record's timeout."""
    root = Path(record.source_root)
    factory = None
    if record.environment:
        cls = resolve(record.environment, root, "environment")
        if not inspect.isclass(cls):
            raise UserInputError("environment", f"{record.environment} is not a class (TRL's environment_factory "
                                                "is called with no arguments to build each instance)")
        factory = timed_environment(cls, record.timeout_s)
    tools = []
    for index, path in enumerate(record.tools):
        fn = resolve(path, root, f"tools[{index}]")
        if not callable(fn):
            raise UserInputError(f"tools[{index}]", f"{path} is not callable")
        tools.append(timed(fn, record.timeout_s, getattr(fn, "__name__", path)))
    return factory, tools

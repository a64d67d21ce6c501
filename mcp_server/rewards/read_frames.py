"""Who made a read (reads.py's hook asks): the reward's own code, or the import machinery, a library, this package.

A read is the reward's when, walking the stack outward from the read, user code (source_only.is_user_file) is met
before what decides it is not:
- an import (the code pin covers the modules it reads): a run of importlib's frames entered by an import
  (`import`, `__import__`, importlib.import_module, a `from` list). importlib's other doors are readers like any
  other (issue 48, round 11: `__loader__.get_data(path)` and `pkgutil.get_data` read a rubric unpinned), and
  so is a module the reward executes itself from a path (`spec.loader.exec_module`, a run starting at exec_module);
- this package's own code (its reads, a sandbox's scratch files, are its business), except its helpers that read a
  file the caller names for the caller (READS_FOR_CALLER: round 11, a reward reading its rubric through
  `mcp_server.userfiles.read_json`).
The standard library and installed packages are walked through: a reward's read through json, pathlib or pandas is
its own.
"""

from __future__ import annotations

import os
import sysconfig
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
STDLIB = tuple(str(Path(p).resolve()) + os.sep for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")})
# importlib's frames through which an import enters the machinery (the outermost of a run of its frames).
IMPORT_ENTRIES = frozenset({"_find_and_load", "_gcd_import", "_handle_fromlist", "__import__"})
# This package's modules whose functions read a file the caller names, on the caller's behalf (native_reads: its
# os.open and its wrapped native readers; read_events: its wrapped os.stat and os.access).
READS_FOR_CALLER = frozenset({PACKAGE / "userfiles.py", PACKAGE / "dataset.py",
                              PACKAGE / "rewards" / "native_reads.py", PACKAGE / "rewards" / "read_events.py"})


@lru_cache(maxsize=4096)
def whose(filename: str) -> str:
    """'import' (the import machinery), 'system' (stdlib, installed, generated), 'package' (this one), 'for caller'
    (this package's readers for their caller), 'user' (by source_only.is_user_file, the one judge of user code: as
    imported and as resolved)."""
    if filename.startswith("<frozen importlib") or filename.startswith("<frozen zipimport"):
        return "import"
    if filename.startswith("<"):
        return "system"
    from mcp_server.rewards.source_only import is_user_file

    resolved = Path(filename).resolve()
    if resolved.is_relative_to(PACKAGE):
        return "for caller" if resolved in READS_FOR_CALLER else "package"
    return "user" if is_user_file(filename) else "system"


def opened_by_user(frame) -> bool:
    """Whether the read whose innermost frame is `frame` is the reward's own (see the module's docstring)."""
    entry = None  # the name of the outermost importlib frame of the run being walked
    while frame is not None:
        kind = whose(frame.f_code.co_filename)
        if kind == "import":
            entry = frame.f_code.co_name
        else:
            if entry in IMPORT_ENTRIES:
                return False
            entry = None
            if kind == "user":
                return True
            if kind == "package":
                return False
        frame = frame.f_back
    return False


@lru_cache(maxsize=4096)
def _in_stdlib(filename: str) -> bool:
    return os.path.realpath(filename).startswith(STDLIB)


def made_by_user(frame) -> bool:
    """Whether the first frame outside the standard library is user code: the call is the reward's own, not a
    library's that it called, nor importlib's (metadata, resources: the import machinery's listings). What reads.py
    refuses is refused, and a listing pinned, only then. This package's readers for their caller (READS_FOR_CALLER)
    are walked through like the standard library: a folder a native reader is given (native_reads: pyarrow's
    read_table('rubric/')) is listed there for the reward, so its listing is pinned (a file added to it is seen)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and not _in_stdlib(name) and whose(name) != "for caller":
            return whose(name) == "user"
        if name.startswith(("<frozen importlib", "<frozen zipimport")) or f"{os.sep}importlib{os.sep}" in name:
            return False
        frame = frame.f_back
    return False


LOADERS = (str(Path(__file__).with_name("source_only.py")), str(Path(__file__).with_name("reads.py")))


def imported_by_name(frame) -> bool:
    """Whether the load a loader reports (source_only.ON_LOAD; `frame`: its caller's) is an import by a module
    name: walking outward through the loader's and importlib's frames, the outermost of them is an import's entry
    (IMPORT_ENTRIES). A user's `spec.loader.exec_module(module)` or `module_from_spec(spec)` is a load by path."""
    entry = None
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(("<frozen importlib", "<frozen zipimport")) or name in LOADERS):
            break
        entry = frame.f_code.co_name
        frame = frame.f_back
    return entry in IMPORT_ENTRIES

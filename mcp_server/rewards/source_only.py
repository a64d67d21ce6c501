"""User code is imported from its source, never from bytecode: the one mechanism every import of user code goes
through (a reward, a grader or judge, an environment or tool, a reward a rule checks, a run's train.py).

A .pyc beside a reward's source runs instead of it when its header carries the source's mtime and size (forged,
or stale: the source rewritten in the same second at the same size), and a hash-based .pyc marked unchecked runs
whatever the source says; a sourceless module.pyc runs with no source at all. The review would then judge other
code than the hash pins and the trainer runs (issue 48, round 10 G2). So `install_source_only` (once per
process) changes the standard source and sourceless loaders: a module whose file is not part of the
interpreter's installation (stdlib, site-packages) nor this package is compiled from its .py each time it is
imported, and no bytecode is read or written for it; a sourceless one is refused, naming it. `import_user` and
`load_user_file` are the doors to it; tests/test_user_code_imports_from_source.py finds every import site in the
package and fails on one that does not go through them.

What runs is what is hashed (issue 48, round 15): each user file the import system or a loader called by user code
loads is read once, and the bytes read are the bytes that run; their sha256 is kept (EXECUTED, by resolved path)
so a hash of the module's source taken after its import hashes what ran (rewards.sources: a module that rewrites
its own file at import is judged by what ran, not by what its file says afterwards). A user extension module
(.so/.pyd) is loaded from a private copy of the bytes hashed, never from its path again (one that links a user
library through its run path, `$ORIGIN`, is refused naming it: that library is neither pinned nor beside the copy,
rewards.elf_links); a user zip archive on sys.path is refused (its members are not files a pin can name). Each
load is handed to the ON_LOAD watchers (rewards.reads pins a module loaded by path, spec_from_file_location +
exec_module, with the reward's reads).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import signal
import site
import sys
import sysconfig
import tempfile
import threading
import zipimport
from functools import lru_cache
from pathlib import Path

from mcp_server.rewards.elf_links import linked_user_libraries

PACKAGE = Path(__file__).resolve().parents[1]


class SourceLoader(importlib.machinery.SourceFileLoader):
    """A source file's loader that never reads nor writes bytecode (load_user_file's)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        data = self.get_data(path)
        ran(path, data, fullname)
        return self.source_to_code(data, path)


def installed_roots() -> list[Path]:
    """The interpreter's installation: its standard library and site-packages folders, resolved."""
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return [Path(p).resolve() for p in paths if p]


@lru_cache(maxsize=4096)
def is_user_file(origin: str) -> bool:
    """Whether a module file is user code: neither the interpreter's installation nor this package, judged both as
    imported and as resolved (round 11: a workspace link to a stdlib file was judged installed by its target, and
    the stock loader ran a forged .pyc from the link's own __pycache__ in the workspace)."""
    roots = [PACKAGE, Path(os.path.abspath(Path(__file__).parents[1])), *_installed(installed_roots)]
    given = Path(os.path.abspath(origin))
    return not all(any(p.is_relative_to(r) for r in roots) for p in (given, given.resolve()))


_ROOTS: list = []


def _installed(installed_roots) -> list:
    """The installation's folders, resolved and as written (a venv's lib64 link, a conda or pyenv path)."""
    if not _ROOTS:
        _ROOTS.extend(installed_roots())
        _ROOTS.extend(Path(os.path.abspath(p)) for p in sys.path if p and Path(p).resolve() in _ROOTS)
    return _ROOTS


_STOCK: dict = {}  # the standard loaders' own get_code, kept when install_source_only replaces them
# resolved path of a user file -> sha256 of the bytes this process last ran from it (the module's doc)
EXECUTED: dict[str, str] = {}
# callables (path, sha256, fullname) told of each user file loaded (rewards.reads registers one)
ON_LOAD: list = []


def ran(path: str, data: bytes, fullname: str) -> str:
    """Keep that `data` (read once from `path`) is what runs as `fullname`; tell the watchers. Its sha256."""
    sha = hashlib.sha256(data).hexdigest()
    EXECUTED[os.path.realpath(path)] = sha
    for watcher in list(ON_LOAD):
        watcher(os.path.abspath(path), sha, fullname)
    return sha


def executed(path: str | os.PathLike) -> str | None:
    """sha256 of the bytes this process last ran from the user file `path`; None when it ran none."""
    return EXECUTED.get(os.path.realpath(path))


def _source_code(self, fullname):
    path = self.get_filename(fullname)
    if not is_user_file(path):
        return _STOCK["source"](self, fullname)
    data = self.get_data(path)  # read once: these bytes are hashed and compiled, never the cache
    ran(path, data, fullname)
    return self.source_to_code(data, path)


def _extension_module(self, spec):
    """A user extension module loaded from a private copy of the bytes read once and hashed (the module's doc)."""
    if not is_user_file(self.path):
        return _STOCK["extension"](self, spec)
    with open(self.path, "rb") as handle:
        data = handle.read()
    linked = linked_user_libraries(data, self.path, is_user_file)
    if linked:
        raise ImportError(linked_refusal(spec.name, self.path, linked[0]), name=spec.name, path=self.path)
    copy, done = _private_copy(data, os.path.basename(self.path))
    try:
        ran(self.path, data, spec.name)
        private = importlib.machinery.ModuleSpec(spec.name, self, origin=copy)
        import _imp

        return _imp.create_dynamic(private)
    finally:
        done()


def _private_copy(data: bytes, name: str):
    """(a path holding `data` that no process can change, what removes it): a sealed memfd read through
    /proc/self/fd (Linux: no folder a racer can plant in or swap; round 18), else a file created in a fresh
    folder (O_CREAT|O_EXCL|O_NOFOLLOW: a link planted there is never written through)."""
    import fcntl

    if hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                        fcntl.F_SEAL_SEAL)
            sealed = os.fstat(fd).st_size == len(data)
        except OSError:
            sealed = False
        if sealed:  # kept open: a number used again would name a library dlopen holds already (by its name)
            return f"/proc/self/fd/{fd}", lambda: None
        os.close(fd)
    folder = tempfile.mkdtemp(prefix="llmft-ext-")
    copy = os.path.join(folder, name)
    with os.fdopen(os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o500), "wb") as handle:
        handle.write(data)

    def done() -> None:
        with contextlib.suppress(OSError):
            os.unlink(copy)
            os.rmdir(folder)
    return copy, done


def linked_refusal(name: str, path: str, link: tuple[str, str, str]) -> str:
    """The refusal of a user extension module that links a user library through its run path (rewards.elf_links):
    names the module, the library's file and what is accepted instead."""
    library, entry, file = link
    return (f"{name} ({path}) links {library} from {file} (its run path {entry!r}): refused, a user extension module "
            "is loaded from a private copy of the bytes the review pins, and a library it links from the workspace "
            f"is neither pinned nor beside that copy; link {library} statically into {os.path.basename(path)} (or "
            "drop the run path and install the library as a system library) and review again")


def zip_refusal(name: str, archive: str) -> str:
    """The one refusal of a user module in a zip archive, said alike where the import happens (here) and where a
    review resolves a module without importing it (rewards.sources, the read-only server): names the module, the
    archive and what is accepted instead."""
    return (f"{name} would be imported from the zip archive {archive}: refused, user code is imported from files a "
            "pin can name (a .py source file, or an extension module's own file; what the review judges is what "
            "training runs); unpack it beside the reward and review again")


def _zip_refused(self, fullname, *args):
    archive = getattr(self, "archive", "?")
    if is_user_file(archive):
        raise ImportError(zip_refusal(fullname, archive), name=fullname, path=archive)
    return _STOCK["zip_" + args[-1]](self, fullname)


def _sourceless_code(self, fullname):
    path = self.get_filename(fullname)
    if is_user_file(path):
        raise ImportError(f"{fullname} ({path}) is bytecode with no source beside it: refused, user code is "
                          "imported from its .py only (what the review judges is what the hash pins and training "
                          "runs); put its source there", name=fullname, path=path)
    return _STOCK["sourceless"](self, fullname)


def install_source_only() -> None:
    """From here on this process runs user modules from their source only (the module's doc); idempotent. The
    standard loaders themselves are changed, so every way to them goes this way: the path finder, a
    spec_from_file_location, runpy, a library's own loader (transformers' trust_remote_code modules)."""
    machinery = importlib.machinery
    if _STOCK:
        return
    from mcp_server.worker import BEFORE_EACH_CALL

    BEFORE_EACH_CALL.append(forget_changed)
    _STOCK.update(source=machinery.SourceFileLoader.get_code, sourceless=machinery.SourcelessFileLoader.get_code,
                  extension=machinery.ExtensionFileLoader.create_module, zip_get_code=zipimport.zipimporter.get_code,
                  zip_load_module=zipimport.zipimporter.load_module)
    machinery.SourceFileLoader.get_code = _source_code
    machinery.SourcelessFileLoader.get_code = _sourceless_code
    machinery.ExtensionFileLoader.create_module = _extension_module
    zipimport.zipimporter.get_code = lambda self, fullname: _zip_refused(self, fullname, "get_code")
    zipimport.zipimporter.load_module = lambda self, fullname: _zip_refused(self, fullname, "load_module")
    stale = [name for name, module in list(sys.modules.items())
             if isinstance(getattr(module, "__spec__", None), machinery.ModuleSpec)
             and isinstance(module.__spec__.loader, machinery.SourcelessFileLoader)
             and module.__spec__.origin and is_user_file(module.__spec__.origin)]
    for name in stale:  # a sourceless user module imported before: imported (and refused) again
        sys.modules.pop(name, None)


def forget_changed() -> list[str]:
    """Before each call of a long-lived process (the worker, the CLI's daemon: worker.BEFORE_EACH_CALL): when a user
    module's file no longer holds the bytes that ran from it (EXECUTED, their sha256), every user module is dropped
    from sys.modules, so the call imports what the files hold now, as a fresh process would; a module keeps its
    helpers' functions, so dropping the changed one alone would keep their old code. The names dropped (none when
    nothing changed: what was imported stays imported)."""
    user, changed = [], False
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None) if spec is not None and getattr(spec, "has_location", False) else None
        if not isinstance(origin, str) or not is_user_file(origin):
            continue
        user.append(name)
        ran = executed(origin)
        if ran is not None and not changed:
            try:
                with open(origin, "rb") as handle:
                    changed = hashlib.sha256(handle.read()).hexdigest() != ran
            except OSError:  # removed or unreadable: not what ran
                changed = True
    importlib.invalidate_caches()  # a module file added since the last call is found
    if not changed:
        return []
    for name in user:
        sys.modules.pop(name, None)
    return sorted(user)


IMPORT_LIMIT_S = 300.0  # LLM_FINETUNING_IMPORT_LIMIT_S: how long a user module's import may take in the worker


def import_user(name: str):
    """importlib.import_module for user code, from its source only; in the worker, within the import limit."""
    install_source_only()
    with _import_limit(name):
        return importlib.import_module(name)


@contextlib.contextmanager
def _import_limit(name: str):
    """In the worker (one call at a time for every door of the server), a user module's import that has not
    finished within LLM_FINETUNING_IMPORT_LIMIT_S fails naming it: one that never returned held that door and every
    later one, its heartbeat keeping it alive (round 12, M4). A timer already running (an import inside a reward's
    call that has one) is left alone."""
    if (not os.environ.get("LLM_FINETUNING_WORKER") or threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return
    try:
        limit = max(0.1, float(os.environ.get("LLM_FINETUNING_IMPORT_LIMIT_S", IMPORT_LIMIT_S)))
    except ValueError:
        limit = IMPORT_LIMIT_S

    def expired(_signum, _frame):
        raise TimeoutError(f"its import did not finish within {limit:g} s (LLM_FINETUNING_IMPORT_LIMIT_S): a "
                           "module's top level must not wait; do slow work inside the reward, or raise the limit")

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def load_user_file(name: str, path: str | os.PathLike):
    """A module executed from the source file `path` (a run's train.py), never from bytecode; FileNotFoundError
    naming it when the source is not there."""
    install_source_only()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such source file (user code is imported from its .py only)")
    loader = SourceLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module

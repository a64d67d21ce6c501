"""`python -m mcp_server.training.trainer.verified_script train/train.py ARGS...`: run the script the gate verified.

launch_training's gate compares train/train.py with the verdict's pin, then a shell and an interpreter start and
read the file again: a script swapped in between (and put back) would run unreviewed, and a swapped script checks
nothing. The launchers start this module instead: it reads the script's bytes once, compares their sha256 with the
one the launcher passed (SCRIPT_SHA_ENV, the verdict's pin; absent when run by hand) and runs those bytes as
`__main__`, with the script's own `__file__` (so its run directory and imports are what they were), issue 48.
It refuses to run after a site hook from outside the interpreter's installation (`foreign_site_hooks`), any
module imported, or folder searched for one, from outside it and this package (`foreign_modules`,
`foreign_path_entries`), with this package imported from anywhere but where the launch script put it
(`foreign_package`), or when a file a pinned ACCELERATE_* variable names is not the reviewed one
(`loader_files_changed`).
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig

SCRIPT_SHA_ENV = "LLM_FINETUNING_SCRIPT_SHA256"
# Where the launch script meant this package to come from (launchers.base.python_env): the folder put on PYTHONPATH,
# or "installed" (the interpreter's own site-packages). Absent when run by hand: nothing to compare with.
PACKAGE_ENV = "LLM_FINETUNING_PACKAGE"
VERIFYING = False  # set by main(): this process is the trainer verified_script started (script_support reads it)


def _installation_roots() -> set[str]:
    paths = [p for k in ("stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_paths().get(k))]
    return {f(p) + os.sep for p in paths for f in (os.path.abspath, os.path.realpath)}


def foreign_package() -> str | None:
    """Where `mcp_server` was imported from, when that is not where the launch script meant (PACKAGE_ENV): a copy
    put first on PYTHONPATH after the script set it (a shell hook, a wrapper interpreter) would run its own checks,
    or none (issue 48). None: the meant one, or nothing to compare with."""
    meant = os.environ.get(PACKAGE_ENV, "").strip()
    if not meant:
        return None
    package = os.path.dirname(os.path.realpath(sys.modules["mcp_server"].__file__ or ""))
    if meant == "installed":
        inside = any(package.startswith(root) for root in _installation_roots())
    else:
        inside = package == os.path.realpath(os.path.join(meant, "mcp_server"))  # meant: a folder linking to it
    return None if inside else package


def _under(origin: str, roots) -> bool:
    """Whether file `origin` lies under one of `roots` (each ending in os.sep), as written or with its links
    resolved. Each form is computed once, not once per root: the trainer's check runs this on every imported
    module."""
    return any(any(path.startswith(root) for root in roots) for path in _forms(origin))


def _forms(path: str):
    """`path` as written (absolute), then with its links resolved; the second only when asked for."""
    yield os.path.abspath(path)
    yield os.path.realpath(path)


def foreign_site_hooks() -> list[str]:
    """The site hooks (sitecustomize, usercustomize) this interpreter imported at its start from outside its own
    installation (its stdlib and site-packages): code that ran before any check (issue 48). The launchers start
    the trainer with a PYTHONPATH of this package alone and no user site (launchers.base.PYTHON_ENV)."""
    roots = _installation_roots()
    found = []
    for name in ("sitecustomize", "usercustomize"):
        origin = getattr(sys.modules.get(name), "__file__", None)
        inside = origin and _under(origin, roots)  # a distribution's own hook may link elsewhere (/etc)
        if name in sys.modules and not inside:
            found.append(f"{name} ({origin or 'no file'})")
    return found


def foreign_modules() -> list[str]:
    """'name (file)' for each module already imported whose file lies outside the interpreter's own installation,
    the recorded training paths (`_allowed_roots`) and this package's folder: a `hashlib.py` beside the package
    on PYTHONPATH, or any module put first on the path, ran before this check (round 8, G4). Checked when the
    launch script started the trainer (PACKAGE_ENV): run by hand, a test's own modules are imported too."""
    package = os.path.dirname(os.path.realpath(sys.modules["mcp_server"].__file__ or ""))
    roots = {*_installation_roots(), *_allowed_roots(), package + os.sep}
    found = []
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if not isinstance(origin, str) or not os.path.isabs(origin):
            continue  # built in, frozen, a namespace: no file put on the path
        if not _under(origin, roots):
            found.append(f"{name} ({origin})")
    return found


def foreign_path_entries() -> list[str]:
    """Each folder the import system was given (a `sys.path` entry) or has searched (a key of
    `sys.path_importer_cache`, which keeps every folder the path finder looked in, packages' own too) that lies
    outside the roots `foreign_modules` allows and is not the launch script's package folder (PACKAGE_ENV): a
    module came, or could come, from there before this check. `foreign_modules` alone reads `sys.modules`, which a
    shadow can leave (round 8: one that deletes its own entry after running passed); a module is found only
    through a path entry, and the folder it was found in stays in the importer cache. A path hook's own entry (an
    editable install's finder, put there by a .pth file of the site-packages) reads no folder: not judged."""
    import importlib.machinery
    import zipimport

    package = os.path.dirname(os.path.realpath(sys.modules["mcp_server"].__file__ or ""))
    roots = {*_installation_roots(), *_allowed_roots(), package + os.sep}
    meant = os.environ.get(PACKAGE_ENV, "").strip()
    exact = {os.path.realpath(meant)} if meant and meant != "installed" else set()
    exact |= _pth_folders(roots)  # a .pth file of the site-packages adds them: trusted as those folders are
    # the interpreter's own zipped stdlib, named on every sys.path whether it exists or not
    exact.add(os.path.join(sys.base_prefix, sys.platlibdir, f"python{sys.version_info[0]}{sys.version_info[1]}.zip"))
    files = (importlib.machinery.FileFinder, zipimport.zipimporter, type(None))
    found = []
    for entry in dict.fromkeys([*sys.path, *sys.path_importer_cache]):
        if not isinstance(entry, str) or not isinstance(sys.path_importer_cache.get(entry), files):
            continue  # a path hook's own finder, not a folder
        where = os.path.abspath(entry or ".")
        inside = any(any((form.rstrip(os.sep) + os.sep).startswith(root) for root in roots) for form in _forms(where))
        if not ({where, os.path.realpath(where)} & exact or inside):
            found.append(entry)
    return found


def _pth_folders(roots) -> set[str]:
    """The folders the .pth files in `roots` (the site-packages among them) put on sys.path, resolved: site.py
    adds each line that is not a comment or an `import` line, relative to that folder (an old-style editable
    install's source folder, a conda package's extra folder)."""
    found = set()
    for root in roots:
        try:
            names = [n for n in os.listdir(root) if n.endswith(".pth")]
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(root, name), encoding="utf-8", errors="replace") as handle:
                    lines = handle.read(1 << 16).splitlines()
            except OSError:
                continue
            found |= {os.path.realpath(os.path.join(root, line.rstrip())) for line in lines
                      if line.strip() and not line.startswith(("#", "import ", "import\t"))}
    return found


def _allowed_roots() -> list[str]:
    """Where the trainer's packages may come from: the folders the verdict recorded (the pinned interpreter's own
    stdlib and site-packages, passed as TRAINING_PATHS_ENV), else (run by hand) this interpreter's own."""
    from mcp_server.inspection.loader_env import TRAINING_PATHS_ENV

    recorded = [p for p in os.environ.get(TRAINING_PATHS_ENV, "").split(os.pathsep) if p]
    return [os.path.realpath(p).rstrip(os.sep) + os.sep for p in recorded] or sorted(_installation_roots())


def loader_files_changed() -> list[str]:
    """Each file a pinned ACCELERATE_* / FSDP_* variable names (ACCELERATE_DEEPSPEED_CONFIG_FILE) whose content is
    not the one the verdict pinned, as the launcher passed the pins (LOADER_FILES_ENV; absent: nothing pinned, or
    run by hand), relative to the run directory the trainer starts in (inspection.loader_env.files_changed)."""
    import json

    from mcp_server.inspection.loader_env import LOADER_FILES_ENV, files_changed

    passed = os.environ.get(LOADER_FILES_ENV, "").strip()
    if not passed:
        return []
    try:
        pinned = json.loads(passed)
    except ValueError:
        pinned = None
    if not isinstance(pinned, dict) or not all(isinstance(v, str) for v in pinned.values()):
        return [f"{LOADER_FILES_ENV} is not the launcher's pin of those files ({passed[:80]!r})"]
    return files_changed(pinned, os.environ, os.getcwd())


def _origin(name: str, imported: bool) -> list[str]:
    """The files and folders package `name` comes from: the imported module's, else where the import system would
    find it (no code of it runs); [] when it is not installed (train.py then fails on its own)."""
    import importlib.util

    module = sys.modules.get(name)
    if imported and module is not None:
        found = [getattr(module, "__file__", None), *list(getattr(module, "__path__", None) or [])]
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return []
        if spec is None:
            return []
        found = [spec.origin, *list(spec.submodule_search_locations or [])]
    return [f for f in found if f] or ["no file (a namespace or a module built in elsewhere)"]


def foreign_libraries(imported: bool = False) -> list[str]:
    """'name (where)' for each package the trainer imports (loader_env.TRAINER_PACKAGES) that comes from outside
    the pinned interpreter's own stdlib and site-packages (`_allowed_roots`): a shadow `trl` (in the run's folder,
    the workspace, anywhere put first on the path) scores what it likes (issue 48). A venv inside the workspace is
    its own recorded set: allowed, as common as it is (`make demo`'s .venv); the threat model says what that costs.
    `imported`: check the modules already imported (after TRL's import), else where they would be found."""
    from mcp_server.inspection.loader_env import TRAINER_PACKAGES

    roots = _allowed_roots()
    found = []
    for name in TRAINER_PACKAGES:
        for where in _origin(name, imported):
            real = os.path.realpath(where)
            if not any(real.startswith(root) for root in roots):
                found.append(f"{name} ({where})")
                break
    return found


def check_libraries(imported: bool = True) -> None:
    """Refuse (exit 3) when a package the trainer imports is not the pinned interpreter's own (foreign_libraries)."""
    foreign = foreign_libraries(imported)
    if foreign:
        _refuse(f"{', '.join(foreign)} would be imported from outside the training interpreter's own stdlib and "
                "site-packages the inspection verdict recorded: a package put first "
                "on the path scores and trains what it likes. Launch from a shell that does not change PYTHONPATH "
                "or the loader's variables, or install the package into that interpreter and record the verdict "
                "again.")


def _refuse(why: str) -> None:
    """One line on stderr, then exit 3: the trainer's refusal (the launchers read exit 3 as a refused input)."""
    print(f"llm-finetuning: refusing to train: {why}", file=sys.stderr, flush=True)
    raise SystemExit(3)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.exit("usage: python -m mcp_server.training.trainer.verified_script train/train.py [ARGS...]")
    path = os.path.abspath(argv[0])
    with open(path, "rb") as handle:
        data = handle.read()
    from mcp_server.kernel_sets import private_compile_cache

    private_compile_cache()  # before anything compiles: a cache no other user can have planted code in
    expected = os.environ.get(SCRIPT_SHA_ENV, "").strip()
    if expected and hashlib.sha256(data).hexdigest() != expected:
        _refuse(f"{argv[0]} is not the train/train.py the inspection verdict reviewed (changed after "
                "launch_training's gate). Put it back, then launch again.")
    shadow = foreign_package()
    if shadow:
        _refuse(f"this package (mcp_server) was imported from {shadow}, not from where the launch script put it "
                f"({os.environ[PACKAGE_ENV]}): a copy first on PYTHONPATH runs its own checks. Launch with "
                "launch_training from a shell that does not change PYTHONPATH.")
    hooks = foreign_site_hooks()
    if hooks:
        _refuse(f"{', '.join(hooks)} ran at this interpreter's start from outside its installation (a site hook on "
                "PYTHONPATH or in the user's site-packages runs before any check). Launch with launch_training (its "
                "launch script starts the trainer without them).")
    foreign = foreign_modules() if os.environ.get(PACKAGE_ENV, "").strip() else []
    if foreign:
        _refuse(f"{', '.join(foreign[:5])} ran at this interpreter's start from outside its stdlib, its recorded "
                "site-packages and this package's folder (a module put first on the path shadows the stdlib and "
                "runs before any check). Remove it, and launch with launch_training (its launch script puts this "
                "package alone on the path).")
    paths = foreign_path_entries() if os.environ.get(PACKAGE_ENV, "").strip() else []
    if paths:
        named = ", ".join(p or "'' (the working directory)" for p in paths[:5])
        _refuse(f"the import system searched {named}, outside this interpreter's stdlib, its recorded "
                "site-packages and this package's folder: a module found there ran before any check, even one that "
                "left sys.modules after running. Launch with launch_training (its launch script puts this package "
                "alone on the path).")
    changed = loader_files_changed()
    if changed:
        _refuse("; ".join(changed) + ": accelerate or transformers reads it. Put the file back, or record the "
                "inspection verdict again (record_inspection_verdict) once you trust it, then launch again.")
    global VERIFYING
    VERIFYING = True
    check_libraries(imported=False)  # before any of them runs: where the import system would find them
    from mcp_server.errors import UserInputError
    from mcp_server.evidence import STATE_ENV, key as evidence_key

    try:  # every record the trainer writes is signed with it (evidence.py): without it, none would count
        evidence_key()
    except UserInputError as exc:
        _refuse(f"{str(exc).removeprefix('evidence_key: ')}. Its records would read as unrecorded; set "
                f"{STATE_ENV} to the folder holding the key launch_training made.")
    sys.argv = argv
    if not sys.flags.safe_path:  # as `python train/train.py` sets it (train.py removes it again)
        sys.path[0] = os.path.dirname(path)
    module = type(sys)("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    exec(compile(data, path, "exec"), module.__dict__)  # noqa: S102 - the verified bytes, nothing read again


if __name__ == "__main__":
    main()

"""What runs in the training interpreter before Python does, what in its environment changes what trains, and where
its libraries come from (issue 48).

The dynamic loader (ld.so) and the C library obey variables at every process's start, before the interpreter runs a
line: LD_LIBRARY_PATH puts a folder of libraries first (a stand-in libpython whose constructor re-adds a shadow
PYTHONPATH after train/launch.sh cleared PYTHON*), LD_PRELOAD and LD_AUDIT load libraries into the process,
GCONV_PATH and LOCPATH name folders of modules and data the C library loads, GLIBC_TUNABLES changes how it behaves.
launch.sh keeps them (CUDA needs LD_LIBRARY_PATH) and clears PYTHON* only. So the verdict pins them as the reviewer's
launch had them (`loader_env_pin`), the launch gate and train/launch.sh (train/launch.slurm) refuse another value
before anything runs the interpreter, and a folder or library inside the workspace is refused outright
(`inside_workspace`): the attacker holds the workspace (docs/development.md, the threat model).

The packages the trainer imports (`TRAINER_PACKAGES`) must come from the pinned interpreter's own stdlib and
site-packages (`interpreter_paths`, recorded beside training_python): the trainer checks each module's origin
(trainer.verified_script.foreign_libraries).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache

# The variables ld.so and glibc read at a process's start that train/launch.sh does not clear (it clears PYTHON*):
# every LD_* one (LD_LIBRARY_PATH, LD_PRELOAD, LD_AUDIT, LD_BIND_NOW, LD_DEBUG...) and these.
LOADER_NAMES = ("GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH")
LOADER_PREFIX = "LD_"
# The launch environment that changes what trains (round 8, G3): transformers' TrainingArguments reads
# ACCELERATE_MIXED_PRECISION when bf16 and fp16 are false (a bf16 run against a verdict pinning bf16: false),
# ACCELERATE_USE_CPU, ACCELERATE_TORCH_DEVICE, ACCELERATE_USE_DEEPSPEED; accelerate's state and plugins read every
# ACCELERATE_* (dynamo, gradient accumulation and clipping, deepspeed, FSDP, megatron) and FSDP_*. Pinned with the
# loader's, checked by the launch gate and by train/launch.sh before `accelerate launch` sets its own for the ranks.
TRAINING_PREFIXES = ("ACCELERATE_", "FSDP_")
# Of those, the ones whose value names a file accelerate or transformers reads (ACCELERATE_DEEPSPEED_CONFIG_FILE: a
# deepspeed json edited after the verdict trained, round 8): the file's content is pinned beside the name, under
# `NAME + FILE_PIN`, as its sha256 (NO_FILE: nothing, a folder or no regular file there). A relative value is the run
# directory's (where the trainer starts). The trainer gets them as LOADER_FILES_ENV (JSON, name -> digest).
FILE_PARTS = ("_FILE", "_PATH", "_CONFIG")
FILE_PIN = " sha256"
NO_FILE = "no regular file"
LOADER_FILES_ENV = "LLM_FINETUNING_LOADER_FILES"
# The ones that name folders or files the loader or the C library loads code or data from, and how their entries are
# separated (ld.so(8): LD_LIBRARY_PATH by ':' or ';', LD_PRELOAD by ' ' or ':'); an empty or relative entry is the
# process's working directory (for the trainer: the run directory, in the workspace).
LOADER_PATHS = {"LD_LIBRARY_PATH": ":;", "LD_PRELOAD": ": ", "LD_AUDIT": ":", "GCONV_PATH": ":", "LOCPATH": ":"}
# What the trainer imports (train.py, through TRL): each must come from the training interpreter's own installation.
TRAINER_PACKAGES = ("trl", "transformers", "torch", "datasets", "peft", "accelerate")
TRAINING_PATHS = "training_paths"  # the verdict record's key for interpreter_paths
# The trainer's copy of it (launchers.base.verdict_env), os.pathsep-joined; absent when run by hand.
TRAINING_PATHS_ENV = "LLM_FINETUNING_TRAINING_PATHS"
LOADER_PART = ("the launch environment (the dynamic loader's LD_LIBRARY_PATH, LD_PRELOAD, LD_AUDIT, GCONV_PATH, "
               "GLIBC_TUNABLES; accelerate's ACCELERATE_*, FSDP_*)")


def is_loader_variable(name: str) -> bool:
    """A variable of the pinned launch environment: the loader's, or one that changes what trains."""
    return name.startswith((LOADER_PREFIX, *TRAINING_PREFIXES)) or name in LOADER_NAMES


def names_a_file(name: str) -> bool:
    """A pinned variable whose value names a file that changes what trains (its content is pinned too)."""
    return name.startswith(TRAINING_PREFIXES) and any(part in name for part in FILE_PARTS)


def file_digest(value: str, cwd: str) -> str:
    """The sha256 of the file `value` names (relative: to `cwd`), NO_FILE when nothing, a folder or no regular file
    (a pipe is never read) is there."""
    from mcp_server.userfiles import sha256_file

    try:
        return sha256_file(os.path.join(cwd, value))
    except OSError:
        return NO_FILE


def loader_env_pin(environ=None, cwd: str | None = None) -> dict[str, str]:
    """The loader's variables as set in `environ` (default this process's: the reviewer's launch), by name; beside
    each that names a file (`names_a_file`), `NAME sha256`: that file's content (relative to `cwd`, the run
    directory; default this process's)."""
    environ = os.environ if environ is None else environ
    pin = {name: environ[name] for name in sorted(environ) if is_loader_variable(name)}
    for name in [n for n in pin if names_a_file(n)]:
        pin[name + FILE_PIN] = file_digest(pin[name], cwd or os.getcwd())
    return dict(sorted(pin.items()))


def pinned_files(pin) -> dict[str, str]:
    """Variable -> the sha256 of the file it named when `pin` (a loader_env pin) was recorded."""
    pin = pin if isinstance(pin, dict) else {}
    return {key.removesuffix(FILE_PIN): value for key, value in pin.items()
            if key.endswith(FILE_PIN) and isinstance(value, str)}


def files_changed(pinned: dict, environ, cwd: str) -> list[str]:
    """Each variable of `pinned` (pinned_files) set in `environ` whose file's content is not the pinned one: the
    variable, the file it names, the reviewed digest and the one now (the trainer's check, before it reads them)."""
    said = []
    for name, digest in sorted(pinned.items()):
        if name in environ and (now := file_digest(environ[name], cwd)) != digest:
            said.append(_file_line(name, environ[name], digest, now))
    return said


def _file_line(name: str, value, before, after) -> str:
    return (f"the file {name} names ({value!r}) was {_digest(before)} when the verdict was recorded, now "
            f"{_digest(after)}")


def _digest(value) -> str:
    return "unpinned" if value is None else value if value == NO_FILE else f"sha256 {value}"


def loader_change(before, after) -> list[str]:
    """Each loader variable whose value differs between the verdict's pin and now: its name, what was reviewed and
    what it is now (None: unset)."""
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    said = []
    for name in sorted(set(before) | set(after)):
        if name.endswith(FILE_PIN) and before.get(name) != after.get(name):
            variable = name.removesuffix(FILE_PIN)
            said.append(_file_line(variable, after.get(variable, before.get(variable)), before.get(name),
                                   after.get(name)))
        elif before.get(name) != after.get(name):
            said.append(f"{name} was {_value(before.get(name))} when the verdict was recorded, now "
                        f"{_value(after.get(name))}")
    return said


def _value(value) -> str:
    return "unset" if value is None else repr(value)


def loader_entries(name: str, value: str) -> list[str]:
    """The folders and files variable `name` makes the loader read (a bare library name in LD_PRELOAD is searched
    in the library path, which is checked itself): an empty entry is the working directory ('')."""
    separators = LOADER_PATHS.get(name)
    if not separators:
        return []
    parts = [value]
    for sep in separators:
        parts = [piece for part in parts for piece in part.split(sep)]
    if name in ("LD_PRELOAD", "LD_AUDIT"):
        return [p for p in parts if "/" in p]
    return parts


def inside_workspace(environ, workspace: str, cwd: str) -> list[str]:
    """'NAME: entry (-> where)' for each entry of a loader variable in `environ` that lies inside `workspace` (or
    `cwd`'s, the run directory where the trainer starts, for an empty or relative entry): refused outright, whatever
    the verdict recorded."""
    roots = {os.path.realpath(workspace), os.path.realpath(cwd)}
    found = []
    for name, value in loader_env_pin(environ).items():
        for entry in loader_entries(name, value):
            if "$" in entry:  # $ORIGIN, $LIB, $PLATFORM: the loader expands them where the binary lies
                continue
            where = os.path.realpath(os.path.join(cwd, entry))
            if any(where == root or where.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
                found.append(f"{name}: {entry or '(empty: the working directory)'} -> {where}")
    return found


# The interpreter's own installation, as sysconfig and site say it (no user site: the trainer runs without it).
_PATHS_CODE = ("import json, site, sysconfig; p = sysconfig.get_paths(); "
               "print(json.dumps(sorted({p[k] for k in ('stdlib', 'platstdlib', 'purelib', 'platlib') if p.get(k)}"
               " | set(site.getsitepackages()))))")


def interpreter_paths(pin) -> list[str] | None:
    """The stdlib and site-packages folders of the training interpreter `pin` names (pins.training_python_pin),
    resolved: where the trainer's packages may come from. This process's own when it is that interpreter (no process
    started), else asked of it once (isolated, no site hooks run); None when it cannot say."""
    if not isinstance(pin, dict) or not pin.get("path"):
        return None
    return _paths(str(pin["path"]), str(pin.get("realpath")), str(pin.get("sha256")))


@lru_cache(maxsize=8)
def _paths(path: str, realpath: str, sha256: str) -> list[str] | None:
    own = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(sys.executable))),
                       os.path.basename(sys.executable))
    if own == path and os.path.realpath(sys.executable) == realpath and not sys.flags.no_site:
        import site
        import sysconfig

        found = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
        found |= set(site.getsitepackages())
    else:
        try:
            out = subprocess.run([path, "-I", "-c", _PATHS_CODE], capture_output=True, text=True, timeout=60,
                                 stdin=subprocess.DEVNULL, env={k: v for k, v in os.environ.items()
                                                                if not k.startswith("PYTHON")})
            found = set(json.loads(out.stdout)) if out.returncode == 0 else None
        except (OSError, ValueError, subprocess.TimeoutExpired):
            found = None
    if not found:
        return None
    return sorted({os.path.realpath(p) for p in found if p})


def loader_how() -> str:
    """The way on for a loader environment that is not the one the verdict was recorded under."""
    return ("launch from a shell whose loader and ACCELERATE_* / FSDP_* variables (and the files they name) are what "
            "the verdict recorded (set them back, or unset the new ones), or record the verdict again from this one "
            "(record_inspection_verdict; the review and the samples stay valid) once you trust every folder, library, "
            "file and setting it names")

"""A run's processes on this machine, told by identity, never by pid alone (below runstate and the launchers).

run.json says which process to look at, but a process is this run's only when its identity is verified
(verified_launcher): the pid's start time matches, it runs our launcher (bash on the launch's copy of
train/launch.sh, or a person's `bash train/launch.sh`) and its working
directory is this run directory. find_launcher finds that launcher among the processes when run.json is missing,
unreadable or names another process; run_processes finds every process carrying the run's mark (a trainer that
outlived a killed launcher, each rank).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from pathlib import Path

import psutil

from mcp_server.evidence import key_path
from mcp_server.runs import Run


def _bash() -> str:
    """bash by absolute path, resolved once, never from PATH (round 8, G1: a `bash` first on the launching shell's
    PATH set BASH_ENV after the launcher stripped it, and its hook redefined `export` in train/launch.sh)."""
    for path in ("/bin/bash", "/usr/bin/bash"):
        if os.access(path, os.X_OK):
            return path
    return "/bin/bash"  # none: the start fails plainly, nothing is looked up


BASH = _bash()
LAUNCHER = [BASH, "train/launch.sh"]  # the script by hand, from the run directory (the docs' way)
# What a person's launcher looks like: `bash train/launch.sh` from the run directory
LAUNCHERS = (LAUNCHER, ["bash", "train/launch.sh"])
# launch_training's: bash on the launch's own copy of train/launch.sh, outside the workspace (round 9, F1: bash
# reads its script as it runs, and a tail rewritten in place during training ran after the trainer, signed).
COPY_NAME = re.compile(r"[0-9a-f]{32}\.sh")


def launch_copies() -> Path:
    """Where launch_training keeps the copy of train/launch.sh that bash runs: beside the evidence key."""
    return key_path().parent / "launch-scripts"


def launcher_command(copy: Path) -> list[str]:
    """How launch_training starts a run: bash on its copy (launch_copies)."""
    return [BASH, str(copy)]


def is_launcher(cmdline) -> bool:
    """Whether a command line is a run's launcher: a person's `bash train/launch.sh`, or launch_training's bash on
    a copy in launch_copies() named by its launch id."""
    if cmdline in LAUNCHERS:
        return True
    return (isinstance(cmdline, list) and len(cmdline) == 2 and cmdline[0] == BASH
            and Path(cmdline[1]).parent == launch_copies() and bool(COPY_NAME.fullmatch(Path(cmdline[1]).name)))
# train/launch.sh exports the run directory (physical path) under this name: every process of the run (the trainer,
# its ranks, a vLLM server) inherits it, so a trainer whose launcher was killed is still found (run_processes).
RUN_MARK = "LLM_FINETUNING_RUN_DIR"


def verified_launcher(run: Run, pid, create_time=None) -> psutil.Process | None:
    """The process `pid` when it is this run's launcher, else None: alive (not a zombie), started at
    `create_time` when one is given, running `bash train/launch.sh` with this run directory as its working
    directory. Nothing is signalled on a pid that fails this check."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        proc = psutil.Process(pid)
        if isinstance(create_time, (int, float)) and abs(proc.create_time() - create_time) > 1.0:
            return None  # the pid was recycled
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(pid)
            return None
        if not is_launcher(proc.cmdline()) or Path(proc.cwd()).resolve() != run.dir.resolve():
            return None
        return proc
    except (psutil.Error, OSError):
        return None


_LOOK: contextvars.ContextVar[list | None] = contextvars.ContextVar("processes_look", default=None)


@contextlib.contextmanager
def one_look():
    """Within it, every search among this machine's processes (find_launcher, run_processes) reads one listing
    of them, taken once: list_runs reads every run, and a listing per run cost a scan of /proc each. What a
    search finds is still verified on the live process (verified_launcher, the mark, the directory)."""
    token = _LOOK.set(list(psutil.process_iter(["cmdline", "uids"])))
    try:
        yield
    finally:
        _LOOK.reset(token)


def _processes() -> list[psutil.Process]:
    listed = _LOOK.get()
    return listed if listed is not None else list(psutil.process_iter(["cmdline", "uids"]))


def find_launcher(run: Run) -> psutil.Process | None:
    """The live launcher of this run among all processes (for a run.json that is gone or wrong)."""
    for proc in _processes():
        if is_launcher(proc.info.get("cmdline")):
            found = verified_launcher(run, proc.pid)
            if found is not None:
                return found
    return None


def run_processes(run: Run, since: float | None = None) -> list[psutil.Process]:
    """Every live process of this run: those whose environment carries RUN_MARK with exactly this run directory
    (launch.sh exports it, children inherit it), run by this user, working in the run directory (launch.sh cds
    there) and, given `since` (the launcher's recorded start time), started no earlier. Finds a trainer that
    outlived a killed launcher, and each rank; a process of another user or session that merely carries the mark
    in its environment is no process of the run and is never signalled."""
    here = run.dir.resolve()
    uid = os.getuid()
    found = []
    for proc in _processes():
        try:
            uids = proc.info.get("uids")
            if proc.pid == os.getpid() or uids is None or uids.real != uid:
                continue
            if proc.environ().get(RUN_MARK) != str(here):
                continue
            if proc.status() == psutil.STATUS_ZOMBIE or Path(proc.cwd()).resolve() != here:
                continue
            if isinstance(since, (int, float)) and proc.create_time() < since - 1.0:
                continue
            found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def process_alive(pid: int | None, create_time: float | None) -> bool:
    """Whether `pid` is still the process we started (same start time) and not a zombie."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 1.0:
            return False  # the pid was recycled
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(pid)
            return False
        return True
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _reap(pid: int) -> None:
    """Collect an exited child of this server so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass

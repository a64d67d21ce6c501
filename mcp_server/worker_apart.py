"""Start the worker (mcp_server.worker) where the code it imports cannot reach the process that started it.

The worker imports the workspace's code (reward modules, graders, environments). Beside the server, that code could
write to the server's own pipes through /proc/<server>/fd/N (a `tools/call` the client never sent, a reply the
server never made) and signal the server by its pid or process group (issue 48, round 11, W1-W3). bwrap (already
the sandbox's tool) starts the worker in a PID namespace of its own, with a /proc of that namespace and a session
of its own: the server's pid, its /proc entry and its process group are not there to name. The host's /proc is not
mounted beneath the worker's (each top-level entry but /proc is bound alone), so a worker that unmounts its /proc
(a root worker has the right) finds an empty folder. Everything else is the host's as it was: files, devices
(GPUs), network, user, environment, working folder.

Not closed here: a worker started by root keeps root's capabilities, which the sandbox it starts for model-written
code needs (a mount namespace, device nodes, the drop to nobody), so root's workspace code can still write what root
can write (cgroup files included); started by another user it has none (bwrap drops them).

Where bwrap is missing or refused, the worker starts as before and `how()` says why.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

NAMESPACE = ("--unshare-pid", "--new-session", "--proc", "/proc")


def runtime_dir() -> Path | None:
    """A folder only this user can enter (the CLI's warm worker's socket lives there: worker_daemon), or None (then
    no daemon: a shared folder would let others answer)."""
    from mcp_server.kernel_sets import private_folder

    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(base) / "llm-finetuning" if base else Path(tempfile.gettempdir()) / f"llm-finetuning-{os.getuid()}"
    try:  # a link there (to a folder of this user's or not) is no private folder: lstat, never followed
        info = os.lstat(folder) if private_folder(str(folder)) else None
    except OSError:
        return None
    return folder if info is not None and not info.st_mode & 0o077 else None


def _hidden() -> list[str]:
    """The folders the worker must not see, each an empty tmpfs in its namespace: the warm worker's sockets (round
    12, W3: code in the worker put its own socket over the daemon's and answered another process's CLI calls)."""
    folder = runtime_dir()
    return ["--tmpfs", str(folder)] if folder is not None else []


def _binds() -> list[str]:
    """Every top-level entry of / but /proc, as it is (a link stays a link), so no host /proc lies under the new."""
    argv: list[str] = []
    for name in sorted(os.listdir("/")):
        path = "/" + name
        if name == "proc":
            continue
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--dev-bind", path, path]
    return argv


@functools.lru_cache(maxsize=1)
def _bwrap() -> tuple[str | None, str]:
    """(bwrap, how) where a worker can be started apart here, else (None, why not). Asked once per process."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "no `bwrap` on PATH (install bubblewrap)"
    try:
        probe = subprocess.run([bwrap, *_binds(), *NAMESPACE, "/bin/sh", "-c", "test ! -e /proc/1/fd/999999"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"bwrap cannot run here ({exc})"
    if probe.returncode != 0:
        why = probe.stderr.strip()[-200:] or f"exit {probe.returncode}"
        return None, f"bwrap refuses a PID namespace here ({why})"
    return bwrap, "apart: a PID namespace, /proc and session of its own (bwrap)"


def how() -> str:
    """In words: whether workers start apart here, or why not."""
    return _bwrap()[1]


def not_apart() -> str | None:
    """Why workers do not start apart here (check_environment warns), None where they do or may: bwrap's probe
    is a process, so where no worker started yet only bwrap's presence is judged (a start that finds bwrap refusing
    says so on stderr)."""
    if _bwrap.cache_info().currsize == 0:
        return None if shutil.which("bwrap") else "no `bwrap` on PATH (install bubblewrap)"
    return None if _bwrap()[0] else how()


class Started:
    """A worker's process (`proc`: what was started, bwrap or the worker itself) and, when apart, the host pid
    of its namespace's first process (`init_pid`), whose death ends every process in the namespace."""

    def __init__(self, proc: subprocess.Popen, init_pid: int | None):
        self.proc, self.init_pid = proc, init_pid

    def interrupt(self) -> None:
        """Ctrl-C for the worker itself: a terminal's no longer reaches it (a session of its own), so the caller
        interrupted while it waits passes it on (sampling then keeps what it made, as before)."""
        pid = self.proc.pid
        if self.init_pid is not None:  # the worker is the namespace's first process's child
            try:
                with open(f"/proc/{self.init_pid}/task/{self.init_pid}/children") as children:
                    pid = int(children.read().split()[0])
            except (OSError, ValueError, IndexError):
                return
        try:
            os.kill(pid, signal.SIGINT)
        except OSError:
            pass

    def kill(self) -> None:
        if self.init_pid is not None:
            try:
                os.kill(self.init_pid, signal.SIGKILL)
            except OSError:  # already gone
                pass
        self.proc.kill()


def start(command: list[str], mounts: list[str] = (), **popen) -> Started:
    """Popen(command, **popen) in a PID namespace of its own where this machine allows it, with bwrap's `mounts`
    added (the keyless worker's: worker_keyless), else as it is, saying why on stderr."""
    bwrap = _bwrap()[0]
    if bwrap is None:
        print(f"llm-finetuning: the worker runs beside this process, where the code it imports can reach it"
              f"{' and read the evidence key' if mounts else ''}: {how()}", file=sys.stderr, flush=True)
        return Started(subprocess.Popen(command, **popen), None)
    read, write = os.pipe()
    try:
        proc = subprocess.Popen([bwrap, *_binds(), *NAMESPACE, *_hidden(), *mounts, "--info-fd", str(write), "--",
                                 *command], pass_fds=(write,), **popen)
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as info:  # bwrap writes the namespace's first pid, then closes it (or exits)
        text = info.read()
    try:
        init_pid = int(json.loads(text)["child-pid"])
    except (ValueError, KeyError, TypeError):
        init_pid = None
    return Started(proc, init_pid)


def end_with_caller() -> None:
    """Exit as soon as no one holds this worker's input (its caller died or closed it), even while a call runs or
    an import hangs: a worker outlived its server (round 12, M6). A pipe's read end reports POLLHUP then."""
    import select

    watch = select.poll()
    watch.register(sys.stdin.fileno(), 0)  # POLLHUP and POLLERR are always reported
    while True:
        for _fd, event in watch.poll():
            if event & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                os._exit(0)

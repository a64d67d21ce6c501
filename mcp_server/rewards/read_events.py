"""What an audit event reads (reads.py's hook asks): the paths it names, and which of them hold content to pin.

A read is pinned by what the file is, never by where it lives (issue 48, round 16: `/dev/` was left out by its
prefix, and /dev/shm is an ordinary writable tmpfs: a reward reading a knob there, and a grader its rubric, were
never pinned). A regular file is content wherever it is (a workspace, /tmp, /dev/shm, /run/shm, a home folder, a
file or memfd reached through /proc/self/fd); what is not content is left out by its type: a character or block
device (/dev/null, /dev/urandom), a pipe, a socket, and the kernel's own state (a file of procfs or sysfs: made up
by the kernel at each read, with no content of its own to pin). A path through /proc or /dev that leads to a file
(`/proc/self/fd/3`, `/dev/fd/3`, `/proc/self/root/...`) is pinned as the file it leads to; one that leads to no
path (a memfd, a deleted file) is pinned by the /proc path itself, as its content reads there.

Not only reads that open: a look that reads no content (`os.stat`, `os.access`: os.path.exists, isfile,
getsize, pathlib's exists and stat) raises no audit event of Python's own, so `install` makes those two raise
STAT_EVENT, and reads.py pins the file they look at (its content, or that it is absent) when the reward makes
the call (read_frames.made_by_user: a library's own checks are not the reward's input; the trainer's replay judges
what they change by its effect). What a stat sees besides the content (an mtime alone) is the replay's too. A path
looked at and then made by the same code is its scratch (shutil's copies look at their target first: reads.Reads.seen
drops it), and the trainer lets a look at an absent path the review never looked at pass (a scratch name about to be
made); os.lstat is not wrapped (os.path.realpath's walk looks at every folder of a path).

Not only files (round 17, b01: a "bonus" switch read from R17_BONUS, or through `/bin/cat WS/bonus.txt`, set after
the verdict to pay every text but the reviewed ones): `install` makes os.environ's (and environb's) item reads raise
ENV_EVENT, so a variable the reward's own code reads is pinned by its value's sha256 (`env_pin`; never the value: it
may be a secret); a copy of the whole environment (dict(os.environ), passing it on to a child) names no variable, and
the variables a launcher sets per rank (LAUNCH_SET: RANK, WORLD_SIZE, SLURM_*...) are left to the replay. A
child process the reward starts (SPAWNS) is `spawned`: its argv, and the files its arguments name (absolute, with a
separator, a file relative to the working folder, the program where PATH finds it, the words of a shell command
line), pinned as a look. What the child then reads by itself is the replay's (rewards.blind_texts).
"""

from __future__ import annotations

import functools
import os
import stat
import sys
import threading

STAT_EVENT = "llm_finetuning.stat"  # raised by the wrapped os.stat and os.access (install)
ENV_EVENT = "llm_finetuning.environ"  # raised by os.environ's and os.environb's item reads (install)
ENV_PREFIX = "env:"  # a pinned environment variable's key among the file pins: "env:NAME" (no path starts so)
# Set per process by whatever starts the ranks (torchrun, accelerate, SLURM, the launcher's device choice): they
# differ between the review and each rank by design, so they are not pinned; each rank's replay judges what they move.
LAUNCH_SET = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
              "ROLE_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
LAUNCH_PREFIXES = ("TORCHELASTIC_", "SLURM_", "ACCELERATE_", "PMI_", "OMPI_")
SPAWNS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")  # a child process started
LISTINGS = ("os.listdir", "os.scandir")  # a folder's names: pinned by their sorted list
_STAT = os.stat  # the originals, before install() wraps them
_WRAPPED: dict[str, object] = {}


def _kernel_devices() -> frozenset:
    devices = set()
    for mount in ("/proc", "/sys"):
        try:
            devices.add(_STAT(mount).st_dev)
        except OSError:
            continue
    return frozenset(devices)


KERNEL_DEVICES = _kernel_devices()


def not_content(path: str) -> bool:
    """Whether `path` (as _real gives it) holds no content a pin could keep: a device, a pipe, a socket, or the
    kernel's state (procfs, sysfs and what is mounted under /sys). A regular file, a folder or an absent path is
    content (pinned), wherever it is."""
    try:
        found = _STAT(path)
    except (OSError, ValueError):
        return False  # absent (pinned as absent) or unreadable (pinned as such)
    mode = found.st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return True
    return found.st_dev in KERNEL_DEVICES or path.startswith("/sys/")


def real(path) -> str:
    """An absolute path; one through /proc or /dev by what it leads to (round 11: '/proc/self/root' + RUBRIC;
    /dev/fd/N, /dev/stdin), kept as named where it leads to no path (a memfd, a deleted file); a descriptor's."""
    if isinstance(path, int):
        path = f"/proc/self/fd/{path}"
    path = os.path.abspath(os.fsdecode(path))
    if not path.startswith(("/proc/", "/dev/")):
        return path
    resolved = os.path.realpath(path)
    return resolved if os.path.lexists(resolved) or not os.path.lexists(path) else path


def sqlite_files(database) -> list[str]:
    """The files sqlite3.connect(database) reads: the database and its -wal and -journal; none for ':memory:',
    a temporary database ('') or a memory URI."""
    from urllib.parse import unquote, urlsplit

    if isinstance(database, int) or database is None:
        return []
    text = os.fsdecode(database)
    if text.startswith("file:"):
        parts = urlsplit(text)
        if "mode=memory" in parts.query:
            return []
        text = unquote(parts.path)
    if text in ("", ":memory:"):
        return []
    path = os.path.abspath(text)
    return [path, path + "-wal", path + "-journal"]


def open_paths(path, mode, flags) -> tuple[list[str], bool]:
    """A file an open creates or truncates is the reward's scratch; an existing one opened readable (r, r+, a+,
    O_RDONLY, O_RDWR, O_CREAT or not) is a read (round 11: O_CREAT, or an append-open first, made a rubric scratch);
    an append to an existing file without reading it is neither."""
    path = real(path)
    exists = os.path.isfile(path)
    if mode is None:
        readable = flags & os.O_ACCMODE in (os.O_RDONLY, os.O_RDWR)
        fresh = bool(flags & (os.O_TRUNC | os.O_EXCL)) or (bool(flags & os.O_CREAT) and not exists)
    else:
        readable = "r" in str(mode) or "+" in str(mode)
        fresh = "w" in str(mode) or "x" in str(mode) or ("a" in str(mode) and not exists)
    if fresh:
        return [path], True
    return ([path], False) if readable or not exists else ([], False)


def event_paths(event: str, args) -> tuple[list[str], bool]:
    """(the paths an event reads or writes, whether it writes), what holds no content left out (not_content)."""
    paths, writes = _named(event, args)
    return [p for p in paths if not not_content(p)], writes


def _named(event: str, args) -> tuple[list[str], bool]:
    if event == "open":
        path, mode, flags = args
        return ([], False) if isinstance(path, int) or path is None else open_paths(path, mode, flags)
    if event == STAT_EVENT:
        return ([], False) if isinstance(args[0], int) or args[0] is None else ([real(args[0])], False)
    if event == "sqlite3.connect":
        return sqlite_files(args[0]), False
    if event in LISTINGS:
        return [os.path.join(real(args[0] if args and args[0] is not None else "."), "")], False
    if event == "os.mkdir" and not isinstance(args[0], int):  # a folder it makes: its listing is its own scratch
        folder = real(args[0])
        return ([], False) if os.path.isdir(folder) else ([os.path.join(folder, "")], True)  # makedirs(exist_ok)
    return [], False


def env_pin(key: str) -> dict:
    """An "env:NAME" key pinned now, in this process: {env: sha256 of the value} (never the value: it may be a
    secret) or {absent: True}."""
    import hashlib

    value = _environ_get(os.environ, key[len(ENV_PREFIX):])
    return {"absent": True} if value is None else {"env": hashlib.sha256(value.encode("utf-8", "surrogateescape"))
                                                   .hexdigest()}


def _environ_get(environ, name):
    try:
        return _ORIGINAL_GETITEM[0](environ, name) if _ORIGINAL_GETITEM else os.environ.get(name)
    except KeyError:
        return None


def spawned(event: str, args) -> tuple[list[str], list[str]]:
    """(the argv of a child process an event starts, the paths its arguments name: pinned as reads). A path is an
    argument (or a word of one, split as a shell would: `sh -c "cat f"`) that is absolute or holds a separator, or a
    file that exists relative to the working folder; the program by where PATH finds it."""
    import shlex
    import shutil

    if event == "os.system":
        argv, cwd = [os.fsdecode(args[0])], None
    elif event == "subprocess.Popen":
        program, argv, cwd = args[0], args[1], args[2]
        argv = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv or [])
        argv = [os.fsdecode(a) for a in argv]
        argv = [os.fsdecode(program)] + argv if program is not None and argv[:1] != [os.fsdecode(program)] else argv
    else:  # os.exec (path, args, env), os.posix_spawn (path, argv, env), os.spawn (mode, path, args, env)
        path, argv = (args[1], args[2]) if event == "os.spawn" else (args[0], args[1])
        argv, cwd = [os.fsdecode(path), *(os.fsdecode(a) for a in argv or [])], None
    cwd = os.fsdecode(cwd) if cwd is not None else os.getcwd()
    words = []
    for arg in argv:
        try:
            words += [arg, *(shlex.split(arg) if any(c.isspace() for c in arg) else [])]
        except ValueError:
            words.append(arg)
    paths = []
    for word in dict.fromkeys(w.split("=", 1)[-1] if w.startswith("-") else w for w in words):
        if not word or word.startswith("-") or any(c.isspace() for c in word):  # a command line: its words count
            continue
        found = word if os.sep in word else (shutil.which(word) if word == argv[0] else None)
        if found is None and os.path.isfile(os.path.join(cwd, word)):
            found = word
        if found is not None:
            path = real(os.path.join(cwd, found))
            paths += [] if not_content(path) else [path]
    return argv, paths


_ORIGINAL_GETITEM: list = []
_COPYING = threading.local()  # names: the environment being copied whole, the next first (Watched.keys)


def _watched_environ(environ) -> None:
    """os.environ (or environb) raising ENV_EVENT with the name at each item read (get, in, os.getenv, [])."""
    base = type(environ)
    if getattr(base, "_llm_finetuning_watched", False):
        return
    _ORIGINAL_GETITEM[:] = _ORIGINAL_GETITEM or [base.__getitem__]

    class Watched(base):
        _llm_finetuning_watched = True

        def keys(self):  # a copy of the whole environment (dict(os.environ), {**os.environ}, .copy()) takes the
            names = base.keys(self)  # names, then each value in their order: those reads name no variable
            _COPYING.names = list(reversed(list(names)))
            return names

        def __getitem__(self, key):
            copying = getattr(_COPYING, "names", None)
            if copying and copying[-1] == key:
                copying.pop()
            else:
                _COPYING.names = None
                sys.audit(ENV_EVENT, os.fsdecode(key) if isinstance(key, (str, bytes)) else key)
            return base.__getitem__(self, key)

    environ.__class__ = Watched


def _wrap(original):
    @functools.wraps(original)
    def looked_at(path, *args, **kwargs):
        if not isinstance(path, int):
            sys.audit(STAT_EVENT, path)
        return original(path, *args, **kwargs)

    return looked_at


def install() -> None:
    """os.stat and os.access raise STAT_EVENT (once per process): what the reward looks at is named."""
    for name in ("stat", "access"):
        if name not in _WRAPPED:
            _WRAPPED[name] = _wrap(getattr(os, name))
            setattr(os, name, _WRAPPED[name])
    _watched_environ(os.environ)  # what the reward reads of its environment is named (ENV_EVENT)
    if hasattr(os, "environb"):
        _watched_environ(os.environb)


def environment_or_child(event: str, args, frame, active: list) -> None:
    """A variable the reward's own code reads (ENV_EVENT), pinned as "env:NAME" in each recording of `active`; a
    child process it starts (SPAWNS): its argv kept for the review sheet, the paths its arguments name pinned as
    reads (a look: one absent that the review never named passes). What a library reads or starts for itself is its
    own (read_frames.made_by_user). What the child reads itself is not seen here: the trainer's replay and blind
    probes judge it (rewards.blind_texts)."""
    from mcp_server.rewards.read_frames import made_by_user

    try:
        if not made_by_user(frame):
            return
        if event == ENV_EVENT:
            name = args[0] if isinstance(args[0], str) else None
            if name is not None and name not in LAUNCH_SET and not name.startswith(LAUNCH_PREFIXES):
                for reads in active:
                    reads.seen(ENV_PREFIX + name, False, look=True)
            return
        argv, paths = spawned(event, args)
    except Exception:  # never break a call over a bookkeeping error
        return
    for reads in active:
        reads.spawned(argv)
        for path in paths:
            reads.seen(path, False, look=True)

"""The files reward code reads: recorded while it runs, pinned by content, checked where it runs again.

A reward (or a grader) may read a file by a path in its code (an answer key, a rubric) that no parameter names:
the reward-code hash cannot see it (issue 48, round 9: a rubric rewritten after the verdict trained at -1000 times
the reviewed scale; a rubric switched to "all right" after the baseline PROMOTEd by +88.9 points). So a
`sys.addaudithook` on the "open" event (`os.open`, `open`, `io.open`, `pathlib`'s reads) records every file
the reward code opens while `recording` is active (around the reward calls and the reward modules' import), and
nothing else. Not only "open": every audit event of Python 3.11 that names a path user code reads (issue 48, round
10 G3: a rubric in a SQLite file, opened in C): `sqlite3.connect` pins the database file and its -wal and
-journal (a ':memory:' or temporary database reads no file); `os.listdir` and `os.scandir` (so glob, pathlib's
glob, os.walk) pin a folder's listing, keyed "<folder>/", when the reward lists it itself (a library's or
importlib's own listing is not its input); shutil's copies and archives, mmap and io.open_code read
through "open". What cannot be pinned is refused, naming the call, when user code makes it directly (the first
frame outside the standard library is user code): `ctypes.*` (a C library reads anything) and
`sqlite3.enable_load_extension` / `sqlite3.load_extension`. Whose an event is: read_frames.py (the reward's
own code, through any library or importlib's readers, not an import; never this package's own reads but for its
helpers that read for their caller). Reads the "open" event does not name by path (`os.open` with `dir_fd`, native
readers in C or Rust) are made to: native_reads.py. A look at a file (os.stat, os.access: os.path.exists) is a
read of it too (read_events.py). A read is pinned by what the file is, not where (round 16: /dev/shm was left out
by its prefix): a regular file anywhere is pinned; a device, a pipe, a socket and the kernel's state in procfs and
sysfs are not (read_events.not_content); nor are files (and folders) the same code opened for writing (or made)
first: its own scratch; an existing file opened r+, a+ or O_RDWR is read (pinned), not scratch.

Each file is pinned when first opened (`pin_file`: its sha256, or size/mtime/inode/ctime above 64 MiB; a link by
what it resolves to; absent as absent), with the rewards that read it: kept in review.json, pinned by the verdict,
re-pinned by the gate, checked by the trainer before the first step, at every open in a reward call and, all of
them, at the end of every reward call (`checking`, Reads.recheck); a file read at training that the review never
read is refused too (a new review records it). evaluate_model keeps the graders' pins in the baseline; promote
refuses a baseline whose graders read other content now (evaluation.promote).
A module's first import in a process is recorded (`importing`, rewards.dotted) and handed to later recordings.

An environment variable the reward's own code reads (os.environ[...], .get, `in`, os.getenv) is pinned too, as
"env:NAME" (its value's sha256, or absent; read_events.ENV_EVENT), judged where the rewards train (the trainer's
check and `recheck`; the gate's process is not the trainer's, so it keeps them as recorded); a variable the review
never read is not judged (the reviewed code's branch decides it). A child process the reward starts (subprocess,
os.system, os.exec*, posix_spawn: read_events.SPAWNS) has its argv kept (the review sheet names it) and the files
its arguments name pinned (round 17, b01: `/bin/cat bonus.txt`).

Not covered here (judged by effect by the trainer's replay and its blind probes, inspection/replay.py): a child's
own reads, a file read through an fd it did not open, a native reader not in native_reads; what a stat sees besides
content; a library's own stat; a database an SQL ATTACH opens (no audit event); a file swapped and swapped back
between two checks (docs/development.md, round 17).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import threading

from mcp_server.rewards import native_reads, read_events
from mcp_server.rewards.read_events import ENV_EVENT, ENV_PREFIX, LISTINGS, SPAWNS, STAT_EVENT, event_paths, \
    not_content
from mcp_server.rewards.read_frames import imported_by_name, made_by_user, opened_by_user

WHOLE_FILE_BYTES = 64 << 20
CHILDREN_KEPT = 5  # distinct argv kept per reward (the review sheet names them)
_ACTIVE: list["Reads"] = []  # the recordings in force (innermost last)
_LOCAL = threading.local()  # busy: this thread is inside the hook (its own reads are not the reward's)
_INSTALLED = [False]


class Refused(SystemExit):
    """A reward read a file that is not what the review read (the trainer's check): exit status 3."""


class Unpinnable(PermissionError):
    """Reward code made a call whose reads cannot be pinned (REFUSED): refused while a recording is in force."""


REFUSED = ("ctypes.", "sqlite3.enable_load_extension", "sqlite3.load_extension")  # no file to pin: refused


class Reads:
    """One recording: path -> its pin when first opened, with the rewards that read it (`by`). `expected`: the
    trainer's check, the pins each open must match (a path not there, or another pin, is refused)."""

    def __init__(self, expected: dict | None = None, refuse=None):
        self.files: dict[str, dict] = {}
        self.written: set[str] = set()
        self.looked: set[str] = set()  # paths only looked at (STAT_EVENT) so far
        self.reward = "the reward modules' import"
        self.expected = expected
        self.refuse = refuse
        self.problem: str | None = None
        self.children: dict[str, list[list[str]]] = {}  # reward -> the argv of the child processes it started

    def spawned(self, argv: list[str]) -> None:
        started = self.children.setdefault(self.reward, [])
        if argv not in started and len(started) < CHILDREN_KEPT:
            started.append(argv)

    def seen(self, path: str, writes: bool, ran: dict | None = None, look: bool = False) -> None:
        if path.startswith(ENV_PREFIX) and self.expected is not None and path not in self.expected:
            return  # a variable the review never read: decided by the reviewed code's branch (read_events)
        if writes:
            self.written.add(path)
            if path in self.looked:  # looked at, then made: its own scratch (shutil's copies look at the target)
                self.files.pop(path, None)
            return
        if path in self.written or (self.expected is not None and (self.expected.get(path) or {}).get("written")):
            return
        # pinned at its first open; the trainer's check pins every open again (a file swapped after the first step);
        # a module loaded by path: by the bytes that ran (`ran`, _loaded)
        pin = ran or (pin_of(path) if self.expected is not None or path not in self.files else self.files[path])
        if look and self.expected is not None and path not in self.expected and pin.get("absent"):
            return  # a look at nothing the review never looked at: a scratch name about to be made (the replay's)
        if look and path not in self.files:
            self.looked.add(path)
        elif not look:
            self.looked.discard(path)
        self.files.setdefault(path, {**pin, "by": []})
        if self.reward not in self.files[path]["by"]:
            self.files[path]["by"].append(self.reward)
        if self.expected is not None and self.problem is None:
            self.problem = mismatch(path, self.expected.get(path), pin, self.reward)
            if self.problem and self.refuse:
                self.refuse(self.problem)

    def recheck(self, name: str) -> None:
        """The trainer's check at the end of each reward call (`watched`): every file the verdict pinned, pinned
        again now, the first that differs refused (round 16, G1: a file read through an fd kept since the import, a
        database kept open, a path only looked at, all changed after the first step). A file read at each call is
        judged at its open too; one read once and kept is judged here."""
        if self.expected is None or self.problem is not None:
            return
        pinned = {p: pin for p, pin in self.expected.items() if p not in self.written}
        for line in differences(pinned, now(pinned, env=True))[:1]:
            self.problem = line = f"{line}, seen after a call of {name}"
            if self.refuse:
                self.refuse(line)

    def absorb(self, pins: dict) -> None:
        """Another process's recording (its `pins()`: the keyless worker's, evaluation.graders_apart) into this."""
        for path, pin in pins.items():
            if pin == {"written": True}:
                self.written.add(path)
            else:
                self.files.setdefault(path, {**pin, "by": []})
                self.files[path]["by"] += [r for r in pin.get("by", []) if r not in self.files[path]["by"]]

    def pins(self) -> dict:
        """path -> pin (sorted), the files only written marked so."""
        out = {p: self.files[p] for p in sorted(self.files)}
        return out | {p: {"written": True} for p in sorted(self.written) if p not in out}


@contextlib.contextmanager
def recording(into: Reads | None = None):
    """Record (into `into`, else a new Reads) what reward code opens inside this block."""
    _install()
    reads = into if into is not None else Reads()
    _ACTIVE.append(reads)
    try:
        yield reads
    finally:
        _ACTIVE.remove(reads)


# What each user module's import read (module name -> pins), kept for the process: a long-lived worker imports a
# reward module once, and a later recording must still see what its module-level code read then.
AT_IMPORT: dict[str, dict] = {}


@contextlib.contextmanager
def importing(module: str):
    """Around the import of a reward's module (rewards.dotted): a first import records what its module-level code
    opens (AT_IMPORT); one already imported hands the recordings in force what its import read (the trainer's
    check judges each such file as if opened now)."""
    if module in sys.modules:
        for reads in list(_ACTIVE):
            for path, pin in AT_IMPORT.get(module, {}).items():
                _replay(reads, path, pin)
        yield
        return
    before = [r.reward for r in _ACTIVE]
    with recording() as own:
        for reads in _ACTIVE:
            reads.reward = f"{module} (its import)"
        try:
            yield
        finally:
            for reads, old in zip([r for r in _ACTIVE if r is not own], before):
                reads.reward = old
            native_reads.install(_ACTIVE)  # a reader the module imported (and bound) is wrapped before its first call
    AT_IMPORT[module] = own.pins()


def _replay(reads: Reads, path: str, pin: dict) -> None:
    if reads.expected is not None or pin.get("written"):
        name, reads.reward = reads.reward, ", ".join(pin.get("by") or []) or reads.reward
        try:
            reads.seen(path, bool(pin.get("written")))
        finally:
            reads.reward = name
        return
    entry = reads.files.setdefault(path, {**pin, "by": []})
    entry["by"] += [name for name in pin.get("by") or [] if name not in entry["by"]]


@contextlib.contextmanager
def calling(name: str):
    """Reads inside this block are `name`'s (a reward's call)."""
    before = [r.reward for r in _ACTIVE]
    for reads in _ACTIVE:
        reads.reward = name
    try:
        yield
    finally:
        for reads, old in zip(list(_ACTIVE), before):
            reads.reward = old


def watched(func, name: str, reads: Reads):
    """`func` (a reward TRL calls) recording into `reads` while it runs, async when it is: TRL keeps its name."""
    import functools
    import inspect

    target = func.func if isinstance(func, functools.partial) else func
    if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(getattr(target, "__call__", None)):
        async def wrapper(*args, **kwargs):
            with recording(reads), calling(name):
                scores = await func(*args, **kwargs)
            reads.recheck(name)  # before TRL has the scores: the files as reviewed still
            return scores
    else:
        def wrapper(*args, **kwargs):
            with recording(reads), calling(name):
                scores = func(*args, **kwargs)
            reads.recheck(name)
            return scores
    functools.update_wrapper(wrapper, func)  # its attributes too (a NamedReward's params)
    wrapper.__name__ = name
    return wrapper


def pin_of(key: str) -> dict:
    """A recorded key pinned now: an environment variable for "env:NAME" (read_events.env_pin), a folder's listing
    for "<folder>/" (LISTINGS), else the file (pin_file)."""
    if key.startswith(ENV_PREFIX):
        return read_events.env_pin(key)
    return pin_listing(key[:-1] or os.sep) if key.endswith(os.sep) else pin_file(key)


def pin_listing(path: str) -> dict:
    """A folder's names as a reader finds them now: {listing: sha256 of the sorted names}, else as pin_file says."""
    busy = getattr(_LOCAL, "busy", False)
    _LOCAL.busy = True
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return pin_file(path)
    finally:
        _LOCAL.busy = busy
    return {"listing": hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()}


def pin_file(path: str) -> dict:
    """A file as a reader finds it now: {sha256} (or {large: size/mtime/inode/ctime} above 64 MiB), {kind} for a
    directory or what is not a regular file, {absent: True}; with `resolves_to` when a link leads elsewhere."""
    busy = getattr(_LOCAL, "busy", False)
    _LOCAL.busy = True
    try:
        try:
            real = os.path.realpath(path)
        except OSError:  # a link this process may not follow (another process's /proc/<pid>/fd entry)
            real = path
        pin = {"resolves_to": real} if real != path else {}
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return {**pin, "absent": True}
        except OSError as exc:
            return {**pin, "kind": f"unreadable ({exc.strerror})"}
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode):
                return {**pin, "kind": "directory" if stat.S_ISDIR(found.st_mode) else "not a regular file"}
            if found.st_size > WHOLE_FILE_BYTES:
                return {**pin, "large": [found.st_size, found.st_mtime_ns, found.st_ino, found.st_ctime_ns]}
            return {**pin, "sha256": _digest(fd, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)}
        finally:
            os.close(fd)
    finally:
        _LOCAL.busy = busy


_DIGESTS: dict[tuple, str] = {}


def _digest(fd: int, *key) -> str:
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
    _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def now(pins: dict | None, env: bool = False) -> dict:
    """The same files pinned again now, each with the rewards the recording named (`by`). An environment variable
    only with `env` (the trainer's own check: its environment is the one the rewards train in); elsewhere (the gate,
    the verdict, promote's choice) it is kept as recorded, since that process is not where the rewards run."""
    out = {}
    for path, pin in (pins or {}).items():
        if not isinstance(pin, dict):
            continue
        if str(path).startswith(ENV_PREFIX) and not env:
            out[path] = pin
            continue
        out[path] = pin if pin.get("written") else {**pin_of(str(path)), "by": list(pin.get("by") or [])}
    return out


def describe(pin: dict | None) -> str:
    if not pin:
        return "never read at review"
    if pin.get("env"):
        return f"set (its value's sha256 {pin['env'][:12]})"
    if pin.get("absent"):
        return "absent" + (f" (a link to {pin['resolves_to']})" if pin.get("resolves_to") else "")
    link = f"a link to {pin['resolves_to']}, " if pin.get("resolves_to") else ""
    what = pin.get("kind") or (f"sha256 {pin['sha256'][:12]}" if pin.get("sha256") else
                               f"the names in it, sha256 {pin['listing'][:12]}" if pin.get("listing") else
                               f"size/mtime {pin.get('large')}")
    return link + what


def mismatch(path: str, before: dict | None, after: dict, reward: str | None = None) -> str | None:
    """One line naming the file, who reads it and how it changed; None when `after` is the reviewed pin."""
    strip = {"by", "written"}
    if before is not None and {k: v for k, v in before.items() if k not in strip} == \
            {k: v for k, v in after.items() if k not in strip}:
        return None
    by = reward or ", ".join((before or {}).get("by") or after.get("by") or []) or "the reward"
    if path.startswith(ENV_PREFIX) and before is not None:
        how = ("set where it was unset at review" if before.get("absent") else "unset (it was set at review)"
               if after.get("absent") else f"its value changed ({describe(before)} -> {describe(after)})")
        return f"the environment variable {path[len(ENV_PREFIX):]} (read by {by}): {how}"
    if before is None:
        return f"{path} (read by {by}) was never read when the rewards were reviewed"
    if after.get("absent") and not before.get("absent"):
        how = "removed (or moved)"
    elif before.get("absent"):
        how = "added where nothing was"
    elif after.get("resolves_to") != before.get("resolves_to"):
        how = f"replaced by a link ({describe(before)} -> {describe(after)})"
    else:
        how = f"its content changed ({describe(before)} -> {describe(after)})"
    return f"{path} (read by {by}): {how}"


def differences(before: dict | None, after: dict | None) -> list[str]:
    """A line per file whose pin differs between two sets (a file only one set holds included)."""
    before, after = before or {}, after or {}
    lines = []
    for path in dict.fromkeys([*before, *after]):
        if (before.get(path) or {}).get("written") or (after.get(path) or {}).get("written"):
            continue
        if path not in after:
            lines.append(f"{path} (read by {', '.join(before[path].get('by') or [])}) is no longer read")
            continue
        line = mismatch(path, before.get(path), after[path])
        lines += [line] if line else []
    return lines


def _refuse(event: str, args) -> None:
    line = (f"reward code called {event}({', '.join(repr(a)[:80] for a in args)}): what it reads cannot be pinned, "
            "so the review could not vouch for what training would score (issue 48); read files with open or "
            "sqlite3 instead")
    for reads in list(_ACTIVE):
        if reads.refuse:
            reads.refuse(line)
    raise Unpinnable(line)


def _hook(event: str, args) -> None:
    if not _ACTIVE or getattr(_LOCAL, "busy", False):
        return
    if event.startswith(REFUSED):
        if made_by_user(sys._getframe(1)):
            _refuse(event, args)
        elif event == "ctypes.dlopen":  # a library's dlopen of a workspace library: pinned like a read (round 15)
            _dlopened(args[0] if args else None)
        return
    if event == ENV_EVENT or event in SPAWNS:
        _LOCAL.busy = True
        try:
            read_events.environment_or_child(event, args, sys._getframe(1), list(_ACTIVE))
        finally:
            _LOCAL.busy = False
        return
    if event not in ("open", "sqlite3.connect", "os.mkdir", STAT_EVENT) and event not in LISTINGS:
        return
    _LOCAL.busy = True  # what the bookkeeping stats and opens is not the reward's
    try:
        frame = sys._getframe(1)
        if not (made_by_user(frame) if event in LISTINGS or event == STAT_EVENT else opened_by_user(frame)):
            return
        paths, writes = event_paths(event, args)  # by what each is, not where (read_events)
        for path in paths:
            for reads in list(_ACTIVE):
                reads.seen(path, writes, look=event == STAT_EVENT)
    except Refused:
        raise
    except Exception:  # never break an open over a bookkeeping error
        return
    finally:
        _LOCAL.busy = False


def _loaded(path: str, sha: str, fullname: str) -> None:
    """A user file the import system or a loader ran (source_only.ON_LOAD) while a recording is in force: one that
    runs as a module imported by its name (an import statement, import_module: read_frames.imported_by_name) is the
    reward-code hash's (rewards.sources follows it, by whatever name); one run by path (spec_from_file_location +
    exec_module, module_from_spec, even with the module put in sys.modules first: no import found it by name, round
    15 G3) is pinned here by the bytes that ran, so the gate and the trainer see it change."""
    if not _ACTIVE or getattr(_LOCAL, "busy", False) or not_content(path) or imported_by_name(sys._getframe(1)):
        return
    _LOCAL.busy = True
    try:
        for reads in list(_ACTIVE):
            reads.seen(path, False, {**({"resolves_to": os.path.realpath(path)} if os.path.realpath(path) != path
                                        else {}), "sha256": sha})
    finally:
        _LOCAL.busy = False


def _dlopened(name) -> None:
    from mcp_server.rewards.source_only import is_user_file

    path = os.path.abspath(os.fsdecode(name)) if isinstance(name, (str, bytes)) and os.sep in os.fsdecode(name) \
        else None
    if path is None or not_content(path) or not os.path.isfile(path) or not is_user_file(path):
        return
    _LOCAL.busy = True
    try:
        for reads in list(_ACTIVE):
            reads.seen(path, False)
    finally:
        _LOCAL.busy = False


def _install() -> None:
    if not _INSTALLED[0]:
        sys.addaudithook(_hook)
        from mcp_server.rewards.source_only import ON_LOAD

        ON_LOAD.append(_loaded)
        read_events.install()  # os.stat and os.access named (a look at a file is a read of it)
        _INSTALLED[0] = True
    native_reads.install(_ACTIVE)  # each recording: a native reader imported since is wrapped now


def checking(pinned, exit_with) -> Reads:
    """The trainer's check (before the first step) of the files a verdict pinned (`pinned`: path -> pin): each is
    pinned again now, refused (one line on stderr, then `exit_with(3)` raised) on the first that differs; then a
    recording that refuses any open, during a reward's import or call, of a file that is not what was reviewed."""
    pinned = pinned if isinstance(pinned, dict) else {}
    # the files before the folders' listings: a file removed from a folder is named, not only its folder's names
    pinned = dict(sorted(pinned.items(), key=lambda item: str(item[0]).endswith(os.sep)))

    def refuse(line: str) -> None:
        print(f"llm-finetuning: refusing to train: a file (or variable) the reward reads is not what the inspection "
              f"verdict reviewed: {line}. Put it back, or inspect again and record a new verdict, then launch again.",
              file=sys.stderr, flush=True)
        raise exit_with(3)
    for line in differences(pinned, now(pinned, env=True))[:1]:
        refuse(line)
    return Reads(expected=pinned, refuse=refuse)


def watch_all(funcs: list, reads: Reads) -> list:
    """Each reward (not a model: TRL scores those itself) `watched` under the name TRL gives it."""
    import functools

    if reads is None:
        return funcs
    out = []
    for func in funcs:
        inner = func
        while isinstance(inner, functools.partial):
            inner = inner.func
        model = any(c.__name__ == "Module" for c in type(inner).__mro__)
        out.append(func if model else watched(func, getattr(inner, "__name__", type(inner).__name__), reads))
    return out


def unlike(before: dict | None, after: dict) -> list[str]:
    """A line per file read in `after` (a measurement) that is not as `before` (the earlier one) read it: another
    content, or never read then. A file `before` read and `after` did not is no input of `after`."""
    before = before or {}
    lines = [mismatch(path, before.get(path), pin) for path, pin in after.items()
             if not pin.get("written") and not (before.get(path) or {}).get("written")]
    return [line for line in lines if line]

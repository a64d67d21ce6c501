"""One launch at a time per run: an exclusive, non-blocking flock on <run>/.launch.lock around launch_training
and resume_training (checks, start, run.json). A second caller is refused at once with the holder's pid.

The kernel drops the lock when its holder exits, so a crashed server never leaves a run locked. The file
itself stays (deleting it would let two callers lock two different files); it holds the holder's pid and
start time for the refusal message. The started training process does not inherit it: once run.json names
the live launcher, the state gate refuses a second launch instead.

A stop while a launch holds the lock (issue 48, round 12, M3: stop_training answered "not running; nothing to
stop" during the launch's gates, and the launch then trained) asks that launch, by the token its lock record
holds, to start nothing (`<run>/.launch.cancel`, `await_launch`) and waits for the lock: the launch looks for the
request at its last point before it writes or starts anything (`cancel_requested`); a launch past that point
has started its trainer when the lock is free, and the stop stops it. The request lives while that launch holds
the lock: its release removes it, so it never reaches another launch.

The lock is opened as every writer in place opens its file (workspace.open_own_file): never through a symbolic
link, and a hard link, a pipe or a folder there is refused, naming it, before the lock is taken or a byte written
(round 17, b02: a `.launch.lock` linked to a file outside the workspace was truncated, even by a refused launch).
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mcp_server.runs import Run, read_json_if_present
from mcp_server.userfiles import NotRegularFile
from mcp_server.workspace import atomic_write_json, open_own_file

CANCEL_POLL_S = 0.2  # how often a stop waiting for a launch tries the lock
_HELD: dict[str, str] = {}  # this process's held locks: the lock file -> its holder's token


class LockNotOurs(Exception):
    """The run's .launch.lock is no file of the run's own (a link, a pipe, a folder): nothing was opened through
    it; str() names it and what it is."""


class RunLocked(Exception):
    """Another process is launching or resuming the run; `holder` is what it wrote into the lock file."""

    def __init__(self, run: Run, holder: dict):
        self.run, self.holder = run, holder
        pid = holder.get("pid", "unknown")
        since = holder.get("since")
        super().__init__(f"{run.name} is being launched or resumed by another process (pid {pid}"
                         + (f", since {since}" if since else "") + ")")


@contextmanager
def run_lock(run: Run, action: str) -> Iterator[None]:
    """Hold the run's launch lock for the block, or raise RunLocked naming the holder's pid (LockNotOurs when the
    lock file is a link or no regular file: refused, never opened through)."""
    path = run.lock
    try:
        fd = open_own_file(path, os.O_RDWR)
    except NotRegularFile as exc:
        raise LockNotOurs(str(exc)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLocked(run, _holder(fd)) from None
        stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        token = uuid.uuid4().hex
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "since": stamp, "action": action, "token": token}).encode(), 0)
        _HELD[str(path)] = token
        try:
            yield
        finally:
            _HELD.pop(str(path), None)
            _clear(run)  # a stop's request was this launch's alone
            os.ftruncate(fd, 0)  # empty while free: what a refused caller reads is the current holder
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int, wait_s: float = 2.0) -> dict:
    """What the holder wrote; it writes just after taking the lock, so a caller refused in that instant
    waits for it (briefly)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            data = json.loads(os.pread(fd, 4096, 0))
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) or time.monotonic() > deadline:
            return data if isinstance(data, dict) else {}
        time.sleep(0.02)


def cancel_requested(run: Run) -> bool:
    """Whether a stop asked the launch this process holds the run's lock for to start nothing (its token in
    .launch.cancel). The launch asks at its last point before it writes or starts anything."""
    token = _HELD.get(str(run.lock))
    request = read_json_if_present(run.launch_cancel)
    return bool(token) and isinstance(request, dict) and request.get("token") == token


def await_launch(run: Run, wait_s: float, tick: Callable[[float], None] = lambda elapsed: None) -> dict | None:
    """None when no launch or resume holds the run's lock. Else ask it to start nothing (cancel_requested) and wait
    up to `wait_s` for its lock: what it wrote (pid, since, action) with `ended` (the lock came free: the launch
    started its trainer, or cancelled, or was refused) and `waited_s`. `tick(elapsed)` each poll."""
    try:
        fd = open_own_file(run.lock, os.O_RDWR, create=False)
    except OSError:  # never launched here (or not a lock file of the run's, which a launch refuses): none holds it
        return None
    began = time.monotonic()
    try:
        if _try_lock(fd):
            return None
        holder = _holder(fd)
        try:
            atomic_write_json(run.launch_cancel, {"token": holder.get("token"), "pid": os.getpid(),
                                                  "time": time.time()})
        except OSError:  # not writable: the launch is not asked, and a trainer it starts is stopped once it has
            pass
        while time.monotonic() - began < wait_s:
            time.sleep(min(CANCEL_POLL_S, max(wait_s - (time.monotonic() - began), 0.0)))
            tick(time.monotonic() - began)
            if _try_lock(fd, run):
                return {**holder, "ended": True, "waited_s": round(time.monotonic() - began, 1)}
        return {**holder, "ended": _try_lock(fd, run), "waited_s": round(time.monotonic() - began, 1)}
    finally:
        os.close(fd)  # a lock taken here is released: the stop itself holds none


def _try_lock(fd: int, run: Run | None = None) -> bool:
    """Whether the lock was free: taken and released at once (a stop never holds it); with `run`, its cancel
    request is removed meanwhile (one written as the launch ended: no launch holds it, none reads it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    if run is not None:
        _clear(run)
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _clear(run: Run) -> None:
    try:
        run.launch_cancel.unlink(missing_ok=True)
    except OSError:  # a folder in its place: read as no request (it holds no token)
        pass

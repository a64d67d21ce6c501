"""One launch at a time per run: an exclusive, non-blocking flock on <run>/.launch.lock around launch_training
and resume_training (checks, start, run.json). A second caller is refused at once with the holder's pid.

The kernel drops the lock when its holder exits, so a crashed server never leaves a run locked. The file
itself stays (deleting it would let two callers lock two different files); it holds the holder's pid and
start time for the refusal message. The started training process does not inherit it: once run.json names
the live launcher, the state gate refuses a second launch instead.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mcp_server.runs import Run


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
    """Hold the run's launch lock for the block, or raise RunLocked naming the holder's pid."""
    path = run.lock
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLocked(run, _holder(fd)) from None
        stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "since": stamp, "action": action}).encode(), 0)
        try:
            yield
        finally:
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

"""The worker's stderr, copied to this process's (mcp_server.worker): its warnings and logs reach the harness's
log, the last lines explain a death, and a call's answer waits until what the worker wrote before it is copied.

The worker writes MARK and the call's id on stderr before it sends a call's answer (worker.handle); `copied(id)`
waits for that line (at most WAIT_S), so every line written before the answer is out before the caller goes on.
The CLI exits once it has its answer (os._exit): a worker's last lines still in the pipe were lost with it
(speed2: a demo's stderr ended at its 'Phase 6: export' header)."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time

MARK, WAIT_S = "\x00llm-finetuning-answered ", 5.0
STUCK_S = 0.5  # a write to our stderr blocked this long: no one reads it (an MCP client may not), so no wait


def mark(call_id: str) -> None:
    """The worker's side: MARK and `call_id` on stderr after what the call wrote there, from a thread of its own, so
    the answer never waits on a stderr no one drains (a pipe full of a reward's logs)."""
    def write() -> None:
        try:
            sys.stderr.flush()
            os.write(2, f"{MARK}{call_id}\n".encode())
        except (OSError, ValueError):
            pass

    threading.Thread(target=write, name="llm-finetuning-stderr-mark", daemon=True).start()


class StderrCopy:
    def __init__(self):
        self.tail: collections.deque[str] = collections.deque(maxlen=30)
        self.marked, self.marks, self.thread = threading.Condition(), set(), None
        self.writing: float | None = None  # since when a line's write to our stderr has been under way

    def start(self, proc: subprocess.Popen) -> None:
        self.tail.clear()
        self.thread = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self.thread.start()

    def _pump(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            if line.startswith(MARK):  # noted, not copied
                with self.marked:
                    self.marks.add(line[len(MARK):].strip())
                    self.marked.notify_all()
                continue
            self.tail.append(line.rstrip("\n"))
            self.writing = time.monotonic()
            sys.stderr.write(line)
            self.writing = None
        sys.stderr.flush()

    def copied(self, call_id: str) -> None:
        """Return once what the worker wrote before answering `call_id` is copied (or its stderr ended, or our
        stderr takes no more, or WAIT_S)."""
        if self.thread is None:
            return
        deadline = time.monotonic() + WAIT_S
        with self.marked:
            while call_id not in self.marks and self.thread.is_alive() and time.monotonic() < deadline:
                since = self.writing
                if since is not None and time.monotonic() - since > STUCK_S:
                    break
                self.marked.wait(0.05)
            self.marks.discard(call_id)

    def ended(self) -> None:
        """Return once the worker's stderr ended and every line is copied (at most WAIT_S): a dead worker's tail."""
        if self.thread is not None:
            self.thread.join(WAIT_S)

"""The worker's stderr, copied to this process's (mcp_server.worker): its warnings and logs reach the harness's
log, the last lines explain a death, and a call's answer waits until what the worker wrote before it is copied.

The worker writes MARK and the call's id on stderr before it sends a call's answer (worker.handle); `copied(id)`
waits for that line (at most WAIT_S), so every line written before the answer is out before the caller goes on.
The CLI exits once it has its answer (os._exit): a worker's last lines still in the pipe were lost with it
(speed2: a demo's stderr ended at its 'Phase 6: export' header)."""

from __future__ import annotations

import collections
import subprocess
import sys
import threading

MARK, WAIT_S = "\x00llm-finetuning-answered ", 5.0


class StderrCopy:
    def __init__(self):
        self.tail: collections.deque[str] = collections.deque(maxlen=30)
        self.marked, self.marks, self.thread = threading.Condition(), set(), None

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
            sys.stderr.write(line)
        sys.stderr.flush()

    def copied(self, call_id: str) -> None:
        """Return once what the worker wrote before answering `call_id` is copied (or its stderr ended, or WAIT_S)."""
        if self.thread is None:
            return
        with self.marked:
            self.marked.wait_for(lambda: call_id in self.marks or not self.thread.is_alive(), WAIT_S)
            self.marks.discard(call_id)

    def ended(self) -> None:
        """Return once the worker's stderr ended and every line is copied (at most WAIT_S): a dead worker's tail."""
        if self.thread is not None:
            self.thread.join(WAIT_S)

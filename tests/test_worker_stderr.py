"""What the worker writes to stderr before it answers is out of the caller before the caller goes on (speed2: the
demo's stderr ended at its 'Phase 6: export' header once; the CLI exits as soon as it has its answer, and the
thread that copies the worker's stderr had not copied its last lines). The window is forced, not timed: the
caller's stderr is a slow reader (20 ms a line, as a terminal under load), so copying 60 lines takes over a second
while the answer itself comes at once."""

from __future__ import annotations

import sys
import time

import pytest

LINES = [f"worker line {i}" for i in range(60)]


class SlowStderr:
    def __init__(self):
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        time.sleep(0.02)
        self.lines.append(text.rstrip("\n"))
        return len(text)

    def flush(self) -> None:
        pass


def _worker(tmp_path, monkeypatch):
    from mcp_server import worker

    monkeypatch.setenv("LLM_FINETUNING_PYTHON", sys.executable)
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    return worker.Worker(sys.executable)


@pytest.mark.slow
def test_a_calls_stderr_is_copied_before_its_answer_returns(tmp_path, monkeypatch):
    worker = _worker(tmp_path, monkeypatch)
    try:
        worker.call("sys:stderr.write", ("".join(line + "\n" for line in LINES),), {}, lambda *a: None)  # starts it
        slow = SlowStderr()
        monkeypatch.setattr(sys, "stderr", slow)
        worker.call("sys:stderr.write", ("".join(line + "\n" for line in LINES),), {}, lambda *a: None)
        assert slow.lines == LINES  # all of them, at the return: none still in the pipe
        assert not any("answered" in line for line in slow.lines)  # the mark is noted, not copied
    finally:
        worker.close()


@pytest.mark.slow
def test_a_worker_that_writes_its_last_lines_and_exits_names_them(tmp_path, monkeypatch):
    from mcp_server.errors import UserInputError

    worker = _worker(tmp_path, monkeypatch)
    try:
        worker.call("sys:stderr.write", ("warm\n",), {}, lambda *a: None)
        slow = SlowStderr()
        monkeypatch.setattr(sys, "stderr", slow)
        code = f"import os, sys; sys.stderr.write({''.join(line + chr(10) for line in LINES)!r}); os._exit(3)"
        with pytest.raises(UserInputError, match="exited") as raised:
            worker.call("builtins:exec", (code,), {}, lambda *a: None)
        assert slow.lines == LINES
        assert LINES[-1] in str(raised.value)  # its tail explains the death
    finally:
        worker.close()

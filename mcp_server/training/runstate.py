"""A run's state, derived from its process (or its scheduler's job) and its files, never from the server's memory.

derive_state asks the launcher that started the run (launchers.launcher_of(run.json)) to read its live state:
this machine's launchers from the verified process (launchers/local/process_state.py), the SLURM launcher from the
scheduler. A server restart loses nothing. The progress log and the training log are read here too.
"""

from __future__ import annotations

import os

from mcp_server.runs import Run, read_json_if_present
from mcp_server.diagnosis.progress_log import run_progress, unsigned_note
from mcp_server.evidence import emitted_since_launch, valid_run
from mcp_server.training.derived import DerivedState
from mcp_server.training.launchers import launcher_of
from mcp_server.training.runrecord import derive_with, last_progress_line
from mcp_server.userfiles import NotRegularFile, open_regular


def derive_state(run: Run) -> DerivedState:
    """The run's state, read by the launcher its run.json names (none, or a damaged one: this machine's process).
    `note` says what was not as expected (run.json lost or wrong, a copied run) and so what is known. A run emitted
    since its path's last recorded launch (evidence.record_emission, outside the workspace) that holds a launch's
    files is not launched: they are of an earlier run at this path (issue 48, round 12 F1)."""
    emitted = emitted_since_launch(run.dir)

    def state(run: Run, record: dict | None) -> DerivedState:
        found = earlier_launch(run, record) if emitted is not None else []
        if found:
            return DerivedState(state="not_launched", alive=False, note=(
                f"emitted at {emitted} and not launched since (the launcher's record, outside the workspace): "
                f"{', '.join(found)} here {'are' if len(found) > 1 else 'is'} of an earlier run at this path (so "
                "are its launch's progress lines and saves), not this run's, and not read"))
        return launcher_of(record).state(run, record)
    return derive_with(run, state)  # run.json read once (issue 46: a launch reads each run file once)


def read_progress(run: Run) -> tuple[list[dict], str | None]:
    """(the progress lines the trainer signed, what was not read): a half-written or damaged line is skipped, a
    line without the trainer's valid signature dropped and counted (progress_log.run_progress: issue 48 round 9,
    a hand-edited line showed reward 99); a long log is sampled in bounded memory, its latest lines kept whole."""
    try:
        read = run_progress(run)
    except OSError:  # none yet, or not a file
        return [], None
    return read.records, unsigned_note(read)


def last_progress(run: Run) -> dict | None:
    """The last progress line the trainer signed, reading only the end of the file (not a launch's, in a run emitted
    since its last launch: derive_state)."""
    since = emitted_since_launch(run.dir) is not None  # a launch's lines then are an earlier run's
    return last_progress_line(run, lambda line: valid_run(run, run.progress, line)
                              and not (since and line.get("launch_id")))


def earlier_launch(run: Run, record: dict | None) -> list[str]:
    """The files of a launch_training launch in `run` (run.json's `record` or a record naming a launch id), named:
    after an emission with no launch since, an earlier run's at this path (a trainer started by hand tags nothing)."""
    found = ["run.json"] if record is not None and record.get("launch_id") else []
    for path in (run.train_begin, run.outcome, run.exit_record, run.stopped, run.guard):
        value = read_json_if_present(path)
        if isinstance(value, dict) and value.get("launch_id"):
            found.append(path.relative_to(run.dir).as_posix())
    return found


def log_tail(run: Run, lines: int) -> list[str]:
    """Last `lines` lines of train/logs/stdout.log, progress-bar carriage returns folded."""
    path = run.stdout
    if lines <= 0 or not (path.exists() or path.is_symlink()):
        return []
    real, outside = run.leads_outside(path)  # a train/logs (or a log) linked elsewhere would show another run's
    if outside:  # lines as this run's (round 13, N2)
        return [f"({path.relative_to(run.dir)} leads outside the run directory, to {real or 'a link loop'}: not read)"]
    try:  # a directory or a pipe (which would block): say so where the log would be
        with open_regular(path, limit=None) as handle:  # its tail only
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 256 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError as exc:  # a directory, unreadable: say so where the log would be
        return [f"(cannot read {path}: {exc.strerror or exc})" if not isinstance(exc, NotRegularFile) else f"({exc})"]
    # split on newlines only (str.splitlines also splits on "\r"): a progress bar's redraws are one line, its last
    out = [line.rstrip("\r").rsplit("\r", 1)[-1].rstrip() for line in text.split("\n")]
    return [line for line in out if line.strip()][-lines:]


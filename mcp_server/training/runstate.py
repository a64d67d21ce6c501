"""A run's state, derived from its process and its files, never from the server's memory.

run.json (written atomically at launch) says which process to look at: pid plus its start time, so a
recycled pid is not mistaken for the run. The rest comes from files the training process leaves behind:
train/logs/progress.jsonl (steps), outcome.json (success marker), stopped.json / stop-request.json (a stop on
request) and exit-code (written by train/launch.sh when the training command ends). A server restart loses
nothing, and a killed process reads as failed, with its exit code when there is one and the log's last lines.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from mcp_server.runs import Run, read_json_if_present
from mcp_server.workspace import atomic_write_json

TERMINAL = ("succeeded", "failed", "stopped")


def read_run_json(run_dir: Path) -> dict | None:
    return read_json_if_present(Run(run_dir).run_json)


def write_run_json(run_dir: Path, record: dict) -> None:
    atomic_write_json(Run(run_dir).run_json, record)


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


def read_progress(run_dir: Path) -> list[dict]:
    """Every progress line; a half-written last line (process killed mid-write) is skipped."""
    path = Run(run_dir).progress
    lines = []
    try:
        with open(path, encoding="utf-8") as handle:
            for raw in handle:
                try:
                    lines.append(json.loads(raw))
                except json.JSONDecodeError:
                    continue
    except OSError:
        pass
    return lines


def last_progress(run_dir: Path) -> dict | None:
    """The last progress line, reading only the end of the file."""
    path = Run(run_dir).progress
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 65536))
            tail = handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for raw in reversed(tail):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            continue
    return None


def log_tail(run_dir: Path, lines: int) -> list[str]:
    """Last `lines` lines of train/logs/stdout.log, progress-bar carriage returns folded."""
    path = Run(run_dir).stdout
    if lines <= 0 or not path.exists():
        return []
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - 256 * 1024))
        text = handle.read().decode("utf-8", errors="replace")
    out = [line.rsplit("\r", 1)[-1].rstrip() for line in text.splitlines()]
    return [line for line in out if line.strip()][-lines:]


def read_exit_code(run_dir: Path) -> int | None:
    try:
        return int(Run(run_dir).exit_code.read_text().strip())
    except (OSError, ValueError):
        return None


def _newer(path: Path, since: float | None) -> dict | None:
    """The JSON file's content when it was written during the current launch."""
    data = read_json_if_present(path)
    if data is None:
        return None
    if since is not None and path.stat().st_mtime < since - 1:
        return None
    return data


def derive_state(run_dir: Path) -> dict:
    """{state, alive, pid, exit_code, outcome, stop_requested, record} from the process and the files."""
    run = Run(run_dir)
    record = read_run_json(run_dir)
    if record is None:
        outcome = read_json_if_present(run.outcome)  # trained by hand, without launch_training
        state = outcome.get("state", "succeeded") if outcome else "not_launched"
        return {"state": state, "alive": False, "pid": None, "exit_code": None, "outcome": outcome,
                "stop_requested": False, "record": None}
    since = record.get("started_ts")
    pid = record.get("pid")
    alive = process_alive(pid, record.get("create_time"))
    stop_requested = _newer(run.stop_request, since) is not None
    outcome = _newer(run.outcome, since)
    exit_code = read_exit_code(run_dir) if not alive else None
    if alive:
        begun = _newer(run.train_begin, since) is not None
        state = "running" if begun else "starting"
    elif outcome and outcome.get("state") in TERMINAL:
        state = outcome["state"]
        if state == "succeeded" and exit_code not in (None, 0):
            state = "failed"  # it saved the model, then crashed on the way out
    elif stop_requested or _newer(run.stopped, since) is not None:
        state = "stopped"
    else:
        state = "failed"
    return {"state": state, "alive": alive, "pid": pid, "exit_code": exit_code, "outcome": outcome,
            "stop_requested": stop_requested, "record": record}


def sync_run_json(run_dir: Path, derived: dict) -> None:
    """Record a state change in run.json (so a plain reader of run.json sees it too)."""
    record = derived.get("record")
    if record is not None and record.get("state") != derived["state"]:
        record = {**record, "state": derived["state"]}
        if derived["exit_code"] is not None:
            record["exit_code"] = derived["exit_code"]
        write_run_json(run_dir, record)


def checkpoints(run_dir: Path, config: dict) -> list[Path]:
    """checkpoint-N directories with a trainer_state.json (complete saves), by step."""
    out = Run(run_dir).output_dir(config)
    found = []
    for path in out.glob("checkpoint-*"):
        suffix = path.name.split("-", 1)[1]
        if suffix.isdigit() and (path / "trainer_state.json").exists():
            found.append((int(suffix), path))
    return [path for _, path in sorted(found)]

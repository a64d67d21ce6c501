"""A run's state, derived from its process and its files, never from the server's memory.

run.json (written atomically at launch) says which process to look at, but is never trusted alone: a process is
this run's only when its identity is verified (verified_launcher): the pid's start time matches, it runs our
launcher (`bash train/launch.sh`) and its working directory is this run directory. When run.json is missing,
unreadable or names another process, the live launcher is found by that identity among the processes
(find_launcher), so a live run stays visible and stoppable. A run.json written for another directory (the run
was copied) describes the original, not this copy: the copy is a new run. The rest comes from files the
training process leaves behind:
train/logs/progress.jsonl (steps), outcome.json (success marker), stopped.json / stop-request.json (a stop on
request) and exit-code (written by train/launch.sh when the training command ends). A server restart loses
nothing, and a killed process reads as failed, with its exit code when there is one and the log's last lines.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError

from mcp_server.errors import UserInputError, short, validation_message
from mcp_server.runs import Run, read_json_if_present
from mcp_server.diagnosis.metrics import read_progress_records
from mcp_server.training.derived import DerivedState
from mcp_server.training.slurm_launcher import slurm_state
from mcp_server.workspace import atomic_write_json

TERMINAL = ("succeeded", "failed", "stopped")
LAUNCHER = ["bash", "train/launch.sh"]  # how launch_training (and a person, by hand) starts a run
# train/launch.sh exports the run directory (physical path) under this name: every process of the run (the trainer,
# its ranks, a vLLM server) inherits it, so a trainer whose launcher was killed is still found (run_processes).
RUN_MARK = "LLM_FINETUNING_RUN_DIR"


class RunRecord(BaseModel):
    """The fields of run.json this module acts on, checked before a pid is signalled or a time compared: a file a
    person edited or damaged is an error naming it, never a crash or a signal to some other process."""

    model_config = ConfigDict(extra="allow")

    pid: int | None = Field(default=None, gt=0, lt=2**31)
    pgid: int | None = Field(default=None, gt=0, lt=2**31)
    create_time: FiniteFloat | None = None
    started_ts: FiniteFloat | None = None
    started_at: str | None = None
    state: str | None = None
    exit_code: int | None = None


def read_run_json(run: Run) -> dict | None:
    """run.json (launch_training writes it atomically), None when there is none. One that is there but is not a
    JSON object with well-typed fields raises UserInputError('run') naming the file."""
    path = run.run_json
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        checked = RunRecord.model_validate(data, strict=True)
    except (OSError, ValueError, RecursionError) as exc:
        why = validation_message(exc) if isinstance(exc, ValidationError) else getattr(exc, "strerror", None) or exc
        raise UserInputError("run", f"{short(path)} is not a launch record ({short(why)}); launch_training writes it "
                             "(pid, create_time, started_ts, state): restore it, or remove it if no training "
                             "process of this run is alive") from None
    return {**data, **checked.model_dump(exclude_unset=True)}


def verified_launcher(run: Run, pid, create_time=None) -> psutil.Process | None:
    """The process `pid` when it is this run's launcher, else None: alive (not a zombie), started at
    `create_time` when one is given, running `bash train/launch.sh` with this run directory as its working
    directory. Nothing is signalled on a pid that fails this check."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        proc = psutil.Process(pid)
        if isinstance(create_time, (int, float)) and abs(proc.create_time() - create_time) > 1.0:
            return None  # the pid was recycled
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(pid)
            return None
        if proc.cmdline() != LAUNCHER or Path(proc.cwd()).resolve() != run.dir.resolve():
            return None
        return proc
    except (psutil.Error, OSError):
        return None


def find_launcher(run: Run) -> psutil.Process | None:
    """The live launcher of this run among all processes (for a run.json that is gone or wrong)."""
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info.get("cmdline") == LAUNCHER:
            found = verified_launcher(run, proc.pid)
            if found is not None:
                return found
    return None


def run_processes(run: Run) -> list[psutil.Process]:
    """Every live process of this run: those whose environment carries RUN_MARK with this run directory (launch.sh
    exports it, children inherit it). Finds a trainer that outlived a killed launcher, and each rank."""
    here = str(run.dir.resolve())
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(RUN_MARK) == here \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _record_dir(record: dict) -> Path | None:
    try:
        return Path(record["cwd"]).resolve() if isinstance(record.get("cwd"), str) else None
    except (OSError, ValueError):
        return None


def write_run_json(run: Run, record: dict) -> None:
    atomic_write_json(run.run_json, record)


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


def read_progress(run: Run) -> list[dict]:
    """The progress lines (JSON objects; a half-written or damaged line is skipped); a long log is sampled in
    bounded memory, its latest lines kept whole (metrics.read_progress_records)."""
    try:
        return read_progress_records(run.progress).records
    except OSError:  # none yet, or not a file
        return []


def last_progress(run: Run) -> dict | None:
    """The last progress line, reading only the end of the file."""
    path = run.progress
    if not path.is_file():  # none yet; or a directory, a pipe: no progress readable
        return None
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 65536))
            tail = handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for raw in reversed(tail):
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(line, dict):
            return line
    return None


def log_tail(run: Run, lines: int) -> list[str]:
    """Last `lines` lines of train/logs/stdout.log, progress-bar carriage returns folded."""
    path = run.stdout
    if lines <= 0 or not path.exists():
        return []
    if not path.is_file():  # a directory or a pipe (which would block): say so where the log would be
        return [f"(cannot read {path}: not a regular file)"]
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 256 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError as exc:  # a directory, unreadable: say so where the log would be
        return [f"(cannot read {path}: {exc.strerror or exc})"]
    out = [line.rsplit("\r", 1)[-1].rstrip() for line in text.splitlines()]
    return [line for line in out if line.strip()][-lines:]


def read_exit_code(run: Run) -> int | None:
    try:
        return int(run.exit_code.read_text().strip())
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


def _without_record(run: Run, note: str | None) -> DerivedState:
    """No launch record of this directory (never launched, run.json lost, or a copy): what the files say."""
    outcome = read_json_if_present(run.outcome)  # e.g. trained by hand, without launch_training
    exit_code = read_exit_code(run)
    if isinstance(outcome, dict) and outcome.get("state", "succeeded") in TERMINAL:
        state = outcome.get("state", "succeeded")
    elif read_json_if_present(run.stopped) is not None:
        state = "stopped"
    elif exit_code not in (None, 0):
        state = "failed"
    elif run.stdout.exists() or exit_code is not None:
        state = "unknown"
        note = (note or "") + (" Its logs exist but say neither how it ended nor that it runs: see train/logs/.")
    else:
        state = "not_launched"
    return DerivedState(state=state, alive=False, exit_code=exit_code,
                        outcome=outcome if isinstance(outcome, dict) else None, note=note.strip() if note else None)


def derive_state(run: Run) -> DerivedState:
    """The run's state from its process and its files. `note` says what was not as expected (run.json lost or
    wrong, a copied run) and so what is known."""
    try:
        record, damaged = read_run_json(run), None
    except UserInputError as exc:  # a damaged run.json: the live launcher, if any, still tells the state
        record, damaged = None, exc
    if record is not None and record.get("backend") == "slurm":  # the SLURM launcher: the scheduler's word
        return slurm_state(run, record)
    here = run.dir.resolve()
    note = None
    proc = verified_launcher(run, record.get("pid"), record.get("create_time")) if record else None
    # Look among the processes only where a launch may still be live (list_runs reads every run): a record
    # that does not say it ended, or logs without the exit code launch.sh writes last.
    launched = ((run.run_json.exists() and (record is None or record.get("state") not in TERMINAL))
                or (run.stdout.exists() and not run.exit_code.exists()))
    if proc is None and launched:
        proc = find_launcher(run)
        if proc is not None:  # a live launcher the record does not name: trust the process
            note = (f"run.json {'does not name' if record else 'is missing or unreadable; found'} the live launcher "
                    f"(pid {proc.pid}, `bash train/launch.sh` in this directory); state read from that process "
                    "and the logs")
            record = {**(record or {}), "pid": proc.pid, "pgid": proc.pid, "create_time": proc.create_time(),
                      "cwd": str(here), "launcher": LAUNCHER, "state": "running", "reconstructed": True,
                      "started_ts": (record or {}).get("started_ts") or proc.create_time()}
    # The launcher is gone (killed, or it never was ours) but processes of the run live on: the run is alive until
    # they end, so nothing is started over them and stop_training still reaches them.
    orphans = run_processes(run) if proc is None and launched else []
    if orphans:
        pids = [p.pid for p in orphans]
        note = (f"its launcher{' (pid ' + str(record.get('pid')) + ')' if record and record.get('pid') else ''} is "
                f"gone but {len(pids)} process{'es' if len(pids) > 1 else ''} of this run still run (pid "
                f"{', '.join(map(str, pids))}): the run is alive until they end; stop_training stops them")
        record = record or {"cwd": str(here), "state": "running", "reconstructed": True,
                            "started_ts": min(p.create_time() for p in orphans)}
    if record is None:
        if damaged is not None:  # and no live launcher of this run: say which file is bad
            raise damaged
        lost = run.run_json.exists() or run.stdout.exists()
        return _without_record(run, "run.json is missing or unreadable and no launcher of this run is alive." if lost
                               else None)
    origin = _record_dir(record)
    if proc is None and not orphans and origin is not None and origin != here and origin.exists():
        copy = _without_record(run, f"run.json was written for {origin}: this directory is a copy of that run, "
                                    "a new run with its own files; the original's process is not this run's.")
        return replace(copy, copied_record=record)
    since = record.get("started_ts")
    alive = proc is not None or bool(orphans)
    stop_requested = _newer(run.stop_request, since) is not None
    outcome = _newer(run.outcome, since)
    exit_code = read_exit_code(run) if not alive else None
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
    return DerivedState(state=state, alive=alive, pid=record.get("pid"), exit_code=exit_code, outcome=outcome,
                        stop_requested=stop_requested, record=record, note=note,
                        orphans=tuple(p.pid for p in orphans))


def sync_run_json(run: Run, derived: DerivedState) -> DerivedState:
    """Record a state change in run.json (so a plain reader of run.json sees it too); the state, with a note when
    the disk refuses the write, never an error: reading a run's state must work on a full disk."""
    record = derived.record
    if record is not None and (record.get("state") != derived.state or record.get("reconstructed")):
        # A reconstructed record restores a lost or wrong run.json, marked as read from the process.
        record = {**{k: v for k, v in record.items() if k != "reconstructed"}, "state": derived.state}
        if derived.record.get("reconstructed"):
            record["restored_from_process"] = True
        if derived.exit_code is not None:
            record["exit_code"] = derived.exit_code
        if derived.job:
            record["job"] = derived.job
        try:
            write_run_json(run, record)
        except OSError as exc:  # a full disk, a read-only mount: the state is still known, only not recorded
            return derived.noted(f"run.json could not be rewritten ({exc.strerror or exc}): the state above is "
                                 "derived, not recorded")
    return derived


def checkpoints(run: Run, config: dict) -> list[Path]:
    """checkpoint-N directories with a trainer_state.json (complete saves), by step."""
    out = run.output_dir(config)
    found = []
    for path in out.glob("checkpoint-*"):
        suffix = path.name.split("-", 1)[1]
        if suffix.isdigit() and (path / "trainer_state.json").exists():
            found.append((int(suffix), path))
    return [path for _, path in sorted(found)]

"""The state of a run on this machine (the local and accelerate launchers): from its verified process and the
files the training process leaves behind: train/logs/progress.jsonl (steps), outcome.json (success marker),
stopped.json / stop-request.json (a stop on request) and exit-code (written by train/launch.sh when the training
command ends). When run.json is missing, unreadable or names another process, the live launcher is found by its
identity (processes.find_launcher), so a live run stays visible and stoppable. A run.json written for another
directory (the run was copied) describes the original, not this copy: the copy is a new run. A killed process
reads as failed, with its exit code when there is one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mcp_server.runs import Run, read_json_if_present
from mcp_server.training.derived import DerivedState
from mcp_server.training.processes import find_launcher, run_processes, verified_launcher
from mcp_server.evidence import valid_run
from mcp_server.training.runrecord import (TERMINAL, end_notes, launch_of, read_exit_code, stop_failure,
                                           success_problems)

def _record_dir(record: dict) -> Path | None:
    try:
        return Path(record["cwd"]).resolve() if isinstance(record.get("cwd"), str) else None
    except (OSError, ValueError):
        return None


def _marker(run: Run, path: Path, record: dict | None = None) -> dict | None:
    """The JSON file's content: it was written during the current launch, since every launch starts without the
    markers of an earlier one (a relaunch archives the logs, a resume clears them). Its time is not compared
    with the launch's: a clock stepped back after the launch (NTP) would make the outcome of a run that succeeded
    look older than its launch, and the run read failed. A marker tagged with another launch's id than the
    record's (`launch_id`: the trainer writes it) is not this launch's: None. A marker reached through a link
    (train/logs/ or the file itself) is another place's, never this run's: None. So is one llm-finetuning on
    this machine did not sign there (evidence.py: written or copied by hand)."""
    if path.is_symlink() or path.parent.is_symlink():
        return None
    value = read_json_if_present(path)
    if value is not None and not valid_run(run, path, value):
        return None
    wanted = launch_of(run, record)  # the launcher's record of it, never run.json's unsigned word alone
    if value is not None and wanted is not None and value.get("launch_id") != wanted:
        return None
    return value


def _borne_out(run: Run, record: dict | None, state: str, exit_code: int | None,
               note: str | None) -> tuple[str, str | None]:
    """The outcome's state as the run's evidence bears it out: "succeeded" only with exit code 0 (or none yet) and
    the trainer's final save of this launch (runrecord.success_problems); else failed, saying why."""
    if state != "succeeded":
        return state, note
    if exit_code not in (None, 0):
        return "failed", note  # it saved the model, then crashed on the way out
    problems = success_problems(run, record)
    if problems:
        why = ("outcome.json says succeeded but the run's own evidence does not: " + "; ".join(problems[:3]))
        return "failed", f"{note}; {why}" if note else why
    return state, note


def _without_record(run: Run, note: str | None) -> DerivedState:
    """No launch record of this directory (never launched, run.json lost, or a copy): what the files say."""
    outcome = _marker(run, run.outcome)  # e.g. trained by hand, without launch_training
    exit_code = read_exit_code(run) if not run.logs.is_symlink() else None
    if isinstance(outcome, dict) and outcome.get("state", "succeeded") in TERMINAL:
        state = outcome.get("state", "succeeded")
        state, note = _borne_out(run, None, state, exit_code, note)
    elif _marker(run, run.stopped) is not None:
        state = "stopped"
    elif exit_code not in (None, 0):
        state = "failed"
    elif run.stdout.exists() or exit_code is not None:
        state = "unknown"
        note = (note or "") + (" Its logs exist but say neither how it ended nor that it runs: see train/logs/.")
    else:
        state = "not_launched"
    note = end_notes(run, note) if state != "not_launched" else note
    return DerivedState(state=state, alive=False, exit_code=exit_code,
                        outcome=outcome if isinstance(outcome, dict) else None, note=note.strip() if note else None)


def process_state(run: Run, record: dict | None) -> DerivedState:
    """The run's state from its process and its files (`record`: run.json, None when missing or damaged). `note`
    says what was not as expected (run.json lost or wrong, a copied run) and so what is known."""
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
                    f"(pid {proc.pid}, bash on the run's launch script in this directory); state read from that "
                    "process and the logs")
            record = {**(record or {}), "pid": proc.pid, "pgid": proc.pid, "create_time": proc.create_time(),
                      "cwd": str(here), "launcher": proc.cmdline(), "state": "running", "reconstructed": True,
                      "started_ts": (record or {}).get("started_ts") or proc.create_time()}
    # The launcher is gone (killed, or it never was ours) but processes of the run live on: the run is alive until
    # they end, so nothing is started over them and stop_training still reaches them.
    orphans = run_processes(run, (record or {}).get("create_time")) if proc is None and launched else []
    if orphans:
        pids = [p.pid for p in orphans]
        note = (f"its launcher{' (pid ' + str(record.get('pid')) + ')' if record and record.get('pid') else ''} is "
                f"gone but {len(pids)} process{'es' if len(pids) > 1 else ''} of this run still run (pid "
                f"{', '.join(map(str, pids))}): the run is alive until they end; stop_training stops them")
        record = record or {"cwd": str(here), "state": "running", "reconstructed": True,
                            "started_ts": min(p.create_time() for p in orphans)}
    if record is None:  # (a damaged run.json is raised by runrecord.derive_with: no live launcher of this run)
        lost = run.run_json.exists() or run.stdout.exists()
        return _without_record(run, "run.json is missing or unreadable and no launcher of this run is alive." if lost
                               else None)
    origin = _record_dir(record)
    if proc is None and not orphans and origin is not None and origin != here and origin.exists():
        copy = _without_record(run, f"run.json was written for {origin}: this directory is a copy of that run, "
                                    "a new run with its own files; the original's process is not this run's.")
        return replace(copy, copied_record=record)
    alive = proc is not None or bool(orphans)
    stop_requested = _marker(run, run.stop_request, record) is not None
    outcome = _marker(run, run.outcome, record)
    exit_code = read_exit_code(run, record) if not alive and not run.logs.is_symlink() else None
    if run.logs.is_symlink():
        note = ((note + "; ") if note else "") + ("train/logs is a symbolic link: what it leads to is not this "
                                                  "run's record, so it is not read")
    if alive:
        begun = _marker(run, run.train_begin, record) is not None
        state = "stopping" if stop_requested else "running" if begun else "starting"
    elif outcome and outcome.get("state") in TERMINAL:
        state, note = _borne_out(run, record, outcome["state"], exit_code, note)
    elif stop_requested or _marker(run, run.stopped, record) is not None:
        # a stop that ended in a crash (its exit code, signed) is stopped only when its save at the stop is
        # complete: a save that failed there is a failure, never a stop (issue 48, round 8)
        failure = stop_failure(run, record, exit_code) if exit_code not in (None, 0) else None
        state = "failed" if failure else "stopped"
        note = f"{note}; {failure}" if note and failure else failure or note
    else:
        state = "failed"
    if not alive:
        note = end_notes(run, note, record)
    return DerivedState(state=state, alive=alive, pid=record.get("pid"), exit_code=exit_code, outcome=outcome,
                        stop_requested=stop_requested, record=record, note=note,
                        orphans=tuple(p.pid for p in orphans))

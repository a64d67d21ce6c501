"""A run's launch record (run.json) and what every launcher's state reading shares: the record checked before a
pid is signalled, the state change written back, the exit code launch.sh leaves and the complete checkpoints.
Below runstate and the launchers (launchers/), which both read and write it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError

from mcp_server.errors import UserInputError, short, validation_message
from mcp_server.evidence import recorded_launch, run_file, unrecorded, valid_run
from mcp_server.runs import Run, read_json_if_present
from mcp_server.training.trainer.digest import checkpoint_problems, read_saves
from mcp_server.training.derived import DerivedState
from mcp_server.userfiles import BLANK, content_end, open_regular
from mcp_server.workspace import atomic_write_json

TERMINAL = ("succeeded", "failed", "stopped")


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
    if not path.exists() and not path.is_symlink():  # a link to nothing is named below, not read as no record
        return None
    try:
        with open_regular(path, encoding="utf-8") as handle:  # a pipe there: named, never waited on
            data = json.loads(handle.read())
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        checked = RunRecord.model_validate(data, strict=True)
    except (OSError, ValueError, RecursionError) as exc:
        why = validation_message(exc) if isinstance(exc, ValidationError) else getattr(exc, "strerror", None) or exc
        raise UserInputError("run", f"{short(path)} is not a launch record ({short(why)}); launch_training writes it "
                             "(pid, create_time, started_ts, state): restore it, or remove it if no training "
                             "process of this run is alive") from None
    return {**data, **checked.model_dump(exclude_unset=True)}


def write_run_json(run: Run, record: dict) -> None:
    atomic_write_json(run.run_json, record)


def read_exit_code(run: Run, record: dict | None = None) -> int | None:
    """The exit code the launcher recorded and signed (train/logs/exit.json, evidence.py) for the launch `record`
    names; None without one (the plain exit-code file beside it is for people: anyone can write it)."""
    value = signed_record(run, run.exit_record, record)
    code = value.get("exit_code") if value else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def launch_of(run: Run, record: dict | None) -> str | None:
    """The launch id a record must carry to be this launch's: the one the launcher recorded outside the workspace
    (evidence.record_launch; run.json's own launch_id is unsigned: a forger rewrote or removed it to replay an
    earlier launch's records, issue 48 seventh round), whatever run.json says, for a local launch and a SLURM job
    alike (recorded before its process starts, before sbatch); else, for a run no launcher recorded (launched
    before the ledger), run.json's; None: any launch."""
    recorded = recorded_launch(run.dir)
    if recorded is not None:
        return recorded
    wanted = (record or {}).get("launch_id")
    return wanted if isinstance(wanted, str) else None


def signed_record(run: Run, path: Path, record: dict | None = None) -> dict | None:
    """The JSON record at `path` when llm-finetuning on this machine signed it there (evidence.py) and, with a
    launch `record`, for its launch id; None otherwise (absent, unsigned, signed for another run, file or launch)."""
    value = read_json_if_present(path)
    if not isinstance(value, dict) or not valid_run(run, path, value):
        return None
    wanted = launch_of(run, record)
    return None if wanted is not None and value.get("launch_id") != wanted else value


def unsigned_note(run: Run, path: Path) -> str | None:
    """The words for a record file that is there but unsigned (evidence.unrecorded), None when it is absent or
    signed."""
    value = read_json_if_present(path)
    if value is None or (isinstance(value, dict) and valid_run(run, path, value)):
        return None
    return unrecorded(run_file(run, path))


def record_note(run: Run, path: Path, record: dict | None = None) -> str | None:
    """Why a record file that is there is not read (signed_record): unsigned (evidence.unrecorded), or signed for
    another launch than the one the launcher recorded; None when it is absent or read."""
    unsigned = unsigned_note(run, path)
    if unsigned:
        return unsigned
    value, wanted = read_json_if_present(path), launch_of(run, record)
    if isinstance(value, dict) and wanted is not None and value.get("launch_id") != wanted:
        return (f"{run_file(run, path)} is of another launch ({value.get('launch_id')}), not of this launch "
                f"({wanted or 'unrecorded'}, as the launcher recorded it): not read")
    return None


def end_notes(run: Run, note: str | None, record: dict | None = None) -> str | None:
    """`note` with the end records (outcome.json, exit.json) that are there but unsigned (so read as absent), or
    signed for another launch than the one the launcher recorded, named."""
    found = [why for path in (run.outcome, run.exit_record) if (why := record_note(run, path, record))]
    if run.exit_code.exists() and not run.exit_record.exists():
        found.append(f"{run.exit_code.relative_to(run.dir).as_posix()} is not read: the launcher's signed record "
                     f"of the exit is {run.exit_record.relative_to(run.dir).as_posix()}, and there is none")
    return "; ".join(filter(None, [note, *found])) or None


def derive_with(run: Run, state: Callable[[Run, dict | None], DerivedState]) -> DerivedState:
    """`state(run, record)` read on run.json's record (None: there is none, or it is damaged). A damaged run.json is
    raised, naming the file, only when the reading found no live process of the run either (no record to act on)."""
    try:
        record, damaged = read_run_json(run), None
    except UserInputError as exc:  # a damaged run.json: the live launcher, if any, still tells the state
        record, damaged = None, exc
    derived = state(run, record)
    if damaged is not None and derived.record is None:
        raise damaged
    return derived


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
        try:
            write_run_json(run, record)
        except OSError as exc:  # a full disk, a read-only mount: the state is still known, only not recorded
            return derived.noted(f"run.json could not be rewritten ({exc.strerror or exc}): the state above is "
                                 "derived, not recorded")
    return derived


# What transformers' Trainer resumes from (Trainer._load_from_checkpoint): one of these weight files, an FSDP state
# folder, or adapter folders; DeepSpeed saves its own global_step* folder.
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin")


def checkpoint_gaps(run: Run, path: Path) -> list[str]:
    """Why `path` is not a checkpoint a resume can load (complete_checkpoint), in words; [] when it is one."""
    if not path.is_dir():
        return ["not a folder" if path.exists() or path.is_symlink() else "not there"]
    if not (path / "trainer_state.json").is_file():
        return ["no trainer_state.json (the save did not finish)"]
    problems = checkpoint_problems(run, path)
    if problems:
        return problems
    if any((path / name).is_file() for name in WEIGHT_FILES):
        return []
    try:
        folders = [p for p in path.iterdir() if p.is_dir()]
    except OSError as exc:
        return [f"unreadable ({exc.strerror or exc})"]
    if any(p.name.startswith("global_step") or "pytorch_model_fsdp" in p.name
           or any((p / name).is_file() for name in WEIGHT_FILES) for p in folders):
        return []
    return ["no weights in it"]


def complete_checkpoint(run: Run, path: Path) -> bool:
    """A checkpoint folder a resume can load: the save the run's trainer recorded after it (trainer/digest.py, the
    run's train/logs/saves.jsonl: every file it lists there, at its size, and no other), trainer_state.json and
    the weights. A save cut short, a folder holding only trainer_state.json, one a file was added to, or one whose
    own digest was rewritten, is not one."""
    return not checkpoint_gaps(run, path)


def _step_of(path: Path) -> int | None:
    suffix = path.name.split("-", 1)[1] if "-" in path.name else ""
    return int(suffix) if suffix.isdigit() else None


def passed_over(run: Run, config: dict, latest: Path | None, shown: int = 3) -> list[str]:
    """The checkpoint-N entries after `latest` (all of them without one) that are no complete checkpoint, each
    with why, newest first (at most `shown`, then how many more): what a resume passes over, said rather than
    skipped in silence (issue 48, round 8: a file added to checkpoint-3 and the resume quietly took checkpoint-2)."""
    after = _step_of(latest) if latest is not None else -1
    found = sorted(((step, path) for path in run.output_dir(config).glob("checkpoint-*")
                    if (step := _step_of(path)) is not None and step > after), reverse=True)
    out = []
    for step, path in found:
        gaps = checkpoint_gaps(run, path)
        if gaps:
            out.append(f"{path.name} ({'; '.join(gaps[:3])})")
    return out[:shown] + ([f"and {len(out) - shown} more"] if len(out) > shown else [])


def stopped_save(run: Run, record: dict | None) -> tuple[int | None, str | None]:
    """(the step this launch's trainer recorded stopping at: train/logs/stopped.json, signed, of this launch; why
    the checkpoint its save at that step wrote is not a complete one, None when it is); (None, None) without such
    a record. The checkpoint is found by the run's ledger (saves.jsonl), whatever the output_dir."""
    stopped = signed_record(run, run.stopped, record) or {}
    step = stopped.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return None, None
    name = f"checkpoint-{step}"
    if stopped.get("checkpoint_saved") is False:  # the guard stopped without a save
        return step, f"the stop at step {step} saved no checkpoint"
    keys = [s["save"] for s in read_saves(run) if not s.get("final") and s["save"].rsplit("/", 1)[-1] == name]
    if not keys:
        return step, f"{name} was never recorded as saved (train/logs/saves.jsonl)"
    gaps = checkpoint_gaps(run, run.resolve(keys[-1]))
    return step, f"{name} is not a complete checkpoint ({'; '.join(gaps[:3])})" if gaps else None


# A line naming an exception: its class (dotted or not, a bare `Exception` too) ending in one of these words.
ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt|Exit)\b")


def last_error_line(run: Run, span: int = 65536) -> str | None:
    """The last line of train/logs/stdout.log that names an exception (`FileExistsError: ...`), None without one.
    Only whole lines of the last `span` bytes are read: the one the read starts inside is not (its name cut)."""
    try:
        with open_regular(run.stdout, limit=None) as handle:  # its last span only
            start = max(0, os.fstat(handle.fileno()).st_size - span)
            handle.seek(max(0, start - 1))  # the byte before: a newline there means the read starts a line
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    text = text.split("\n", 1)[-1] if start > 0 else text
    found = [line.strip() for line in text.replace("\r", "\n").split("\n") if ERROR_LINE.match(line.strip())]
    return found[-1][:300] if found else None


def stop_failure(run: Run, record: dict | None, exit_code: int | None) -> str | None:
    """Why a run that was asked to stop and has ended did not stop with its checkpoint saved (issue 48, round 8: a
    save that failed at the stop was reported "stopped ... with a checkpoint saved"), from what the trainer and
    the launcher signed: its stopped.json and that checkpoint's save in saves.jsonl, its exit.json; None when
    the checkpoint of the stop's step is complete."""
    step, why = stopped_save(run, record)
    if step is not None and why is None:
        return None
    ended = (f"the trainer exited with code {exit_code}" if exit_code is not None else
             "the trainer ended with no exit code recorded")
    error = last_error_line(run)
    said = f" ({error}; train/logs/stdout.log)" if error else " (train/logs/stdout.log says why)"
    if step is None:
        return f"no checkpoint was saved at the stop: {ended} before it reached its step end{said}"
    return f"the checkpoint save at the stop failed: it stopped at step {step} but {why}; {ended}{said}"


def checkpoints(run: Run, config: dict) -> list[Path]:
    """Complete checkpoint-N directories (complete_checkpoint), by step number (checkpoint-9 before -10)."""
    out = run.output_dir(config)
    found = []
    for path in out.glob("checkpoint-*"):
        suffix = path.name.split("-", 1)[1]
        if suffix.isdigit() and complete_checkpoint(run, path):
            found.append((int(suffix), path))
    return [path for _, path in sorted(found)]


def last_progress_line(run: Run, keep: Callable[[dict], bool] = lambda line: True) -> dict | None:
    """The progress log's readable line that `keep` accepts with the highest step (highest_step), reading only the
    end of the file; None without one (none yet; or a directory, a pipe: no progress readable, training_status
    names it)."""
    try:
        with open_regular(run.progress, limit=None) as handle:  # a device there never ends; the end read
            end = content_end(handle, os.fstat(handle.fileno()).st_size)  # past a NUL run or hole at the end
            handle.seek(max(0, end - 65536))
            tail = handle.read(end - handle.tell()).strip(BLANK).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    kept = []
    for raw in tail:
        try:
            line = json.loads(raw.strip("\0"))
        except (ValueError, RecursionError):
            continue
        if isinstance(line, dict) and keep(line):
            kept.append(line)
    return highest_step(kept)


def highest_step(lines: list[dict]) -> dict | None:
    """The line of the highest step (the later of equal ones), else the last: signed lines carry no order, and one
    moved to the end made status say "step 1/6" for a finished run (issue 48, round 16, F4a)."""
    if not lines:
        return None
    return max(enumerate(lines), key=lambda item: (_line_step(item[1]), item[0]))[1]


def _line_step(line: dict) -> int:
    step = line.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else -1


def _last_logged_step(run: Run) -> int | None:
    """The step of the progress log's last line the trainer signed that has one, None without one."""
    line = last_progress_line(run, lambda line: isinstance(line.get("step"), int) and valid_run(run, run.progress,
                                                                                                  line))
    return line["step"] if line else None


def success_problems(run: Run, record: dict | None) -> list[str]:
    """Why an outcome.json saying "succeeded" is not borne out by the run's own evidence (issue 48: a hand-written
    outcome.json and exit-code made a refused run read succeeded): the trainer's final save of this launch in
    train/logs/saves.jsonl, its files still there at their sizes; this launch's train-begin.json, and a step
    logged in progress.jsonl after it began; the final save at or past the max_steps training began with.
    [] when it holds."""
    wanted = launch_of(run, record)
    rejected: list[str] = []
    mine = [s for s in read_saves(run, rejected) if s.get("final") and (wanted is None or
                                                                         s.get("launch_id") == wanted)]
    if not mine:
        return ["no final save of this launch recorded by the trainer (train/logs/saves.jsonl)", *rejected[-1:]]
    final = mine[-1]
    problems = checkpoint_problems(run, run.resolve(final["save"]), final=True)
    begin = signed_record(run, run.train_begin, record)
    if begin is None:
        return problems + ["no train-begin.json of this launch (training never began)",
                           *filter(None, [unsigned_note(run, run.train_begin)])]
    started, planned, step = begin.get("global_step"), begin.get("max_steps"), final.get("step")
    logged = _last_logged_step(run)
    if logged is None or (isinstance(started, int) and logged <= started):
        problems.append("no step logged in progress.jsonl after training began")
    if isinstance(planned, int) and (not isinstance(step, int) or step < planned):
        problems.append(f"the final save is at step {step}, short of the {planned} steps training began with")
    return problems

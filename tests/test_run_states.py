"""The run-state table (issue 48): every phase a run goes through x every point at which its process can die
(after each file it writes, each checkpoint cut short after each of its files, checkpoints changed after their
save) x what training_status, list_runs, stop_training, resume_training and promote_checkpoint then say.

The cells are generated from the product's own declaration, `training/lifecycle.py` (PHASES, LAUNCH_WRITES,
CHECKPOINT_WRITES): each phase is the writes of its parent phase and its own, and a cell is the run directory as
the process left it when it died after one of them (nothing trains: the directories are constructed, the launcher
is a process that has exited). The expected answers come from the contract in words (`expected` below), never
from the code under test. A phase, a write or a state without a row fails
`test_every_phase_write_and_state_has_a_row`. The live rows that need a training process (still starting,
running, stopping) are in test_run_stop.py; those that read only a live run's files (its markers, a stop's wait)
are here, this test's own process standing in as the run's launcher (`live_run`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from support import append_signed, module_workspace, write_exit, write_signed, write_signed_lines

LAUNCHER = ["bash", "train/launch.sh"]
OLD, NEW = "a" * 32, "b" * 32  # launch ids: the earlier attempt's, the resume's
GONE = 2**31 - 2  # a launcher's pid that no process has (above any pid_max): the process died


@dataclass(frozen=True)
class Event:
    """One write: a Run member of lifecycle.LAUNCH_WRITES (or a checkpoint's file) and what it carries."""

    member: str
    value: typing.Any = None
    step: int | None = None  # a checkpoint's step, a progress line's step
    file: str | None = None  # a checkpoint's file (lifecycle.CHECKPOINT_WRITES)


def checkpoint(step: int) -> list[Event]:
    from mcp_server.training.lifecycle import CHECKPOINT_WRITES

    return [Event("checkpoint", step=step, file=name) for name in CHECKPOINT_WRITES]


def phases() -> dict[str, tuple[str | None, list[Event]]]:
    """phase -> (its parent phase, its own writes after the parent's): the life of lifecycle.PHASES."""
    launch = [Event("run_json", OLD), Event("stdout")]
    running = [Event("train_begin", OLD), Event("progress", step=1), *checkpoint(1), Event("progress", step=2)]
    # a stopped run saves no model into output_dir itself: its checkpoint holds it (walk 11)
    stopped = [Event("stopped", OLD, step=2), *checkpoint(2), Event("outcome", (OLD, "stopped")), Event("exit_code", 0)]
    succeeded = [*checkpoint(2), Event("progress", step=4), Event("final_model", step=4),
                 Event("outcome", (OLD, "succeeded")), Event("exit_code", 0)]
    # resume_training: run.json rewritten for the new launch, the end markers cleared, then the new process writes
    resumed = [Event("run_json", NEW), Event("stdout"), Event("train_begin", NEW), Event("progress", step=3),
               *checkpoint(3), Event("progress", step=4), Event("final_model", step=4),
               Event("outcome", (NEW, "succeeded")), Event("exit_code", 0)]
    return {
        "emitted": (None, []),
        "gated": ("emitted", [Event("verdict")]),
        "launching": ("gated", launch),
        "running": ("launching", running),
        "stopping": ("running", [Event("stop_request", OLD)]),  # stop_training tags it with the launch id
        "stopped": ("stopping", stopped),
        "failed": ("running", [Event("exit_code", 1)]),
        "succeeded": ("running", succeeded),
        "resumed": ("stopped", resumed),
    }


def lineage(phase: str) -> list[Event]:
    parent, own = phases()[phase]
    return (lineage(parent) if parent else []) + own


# Changes after a complete save of checkpoint-2 (a stopped run): each makes it a folder resume must not load.
TAMPERED = {
    "file-removed": "optimizer.pt removed after the save",
    "file-truncated": "model.safetensors cut short after the save",
    "file-added": "adapter_model.safetensors added: weights the run never wrote",
    "file-replaced": "model.safetensors replaced by other bytes of the same size",
    # issue 48, fifth round: the weights overwritten, then the checkpoint's own digest rewritten to match them
    "digest-rewritten": "model.safetensors replaced, then write_checkpoint_digest run on the folder",
}


@dataclass(frozen=True)
class Cell:
    phase: str
    events: tuple[Event, ...]  # everything written, in order, when the process died
    variant: str | None = None  # a TAMPERED key, "record-lost", "old-markers-kept"
    id: str = field(default="")


def cells() -> list[Cell]:
    out = []
    for phase, (parent, own) in phases().items():
        base = lineage(parent) if parent else []
        if not own:
            out.append(Cell(phase, (), id=f"{phase}"))
        for i, event in enumerate(own):
            what = "-".join(str(x) for x in (event.member, event.step, event.file) if x)
            out.append(Cell(phase, tuple(base + own[:i + 1]), id=f"{phase}/after-{i + 1:02d}-{what}"))
    stopped = tuple(lineage("stopped"))
    out += [Cell("stopped", stopped, variant, id=f"stopped/{variant}") for variant in TAMPERED]
    # run.json lost while it ran (a person removed it) and the process died: its logs exist, how it ended unknown
    out.append(Cell("running", tuple(lineage("running")), "record-lost", id="running/record-lost"))
    # a resume that died at once, its earlier attempt's end markers left in train/logs/ (the clearing failed, or a
    # person copied them back): never read as this attempt's outcome
    early = tuple(lineage("stopped") + phases()["resumed"][1][:2])
    out.append(Cell("resumed", early, "old-markers-kept", id="resumed/dead-with-old-markers"))
    # issue 48, fifth round: a hand-written outcome.json (with run.json's launch id) and exit-code 0 on a launch that
    # never trained: no progress, no checkpoint, no model
    forged = (*lineage("launching"), Event("outcome", (OLD, "succeeded")), Event("exit_code", 0))
    out.append(Cell("failed", forged, id="failed/forged-outcome-and-exit-code"))
    # a run that trained to its end, whose final model the trainer never recorded (placed or replaced by hand)
    out.append(Cell("succeeded", tuple(lineage("succeeded")), "final-unrecorded", id="succeeded/final-unrecorded"))
    # the trainer saved the model and recorded its outcome, then exited 1 on the way out
    crashed = (*lineage("succeeded")[:-1], Event("exit_code", 1))
    out.append(Cell("failed", crashed, id="failed/saved-then-exit-1"))
    # checkpoint-9 and checkpoint-10: by step, never by name (checkpoint-10 sorts before checkpoint-9 as text)
    many = (*lineage("stopping"), *checkpoint(9), *checkpoint(10), Event("stopped", OLD, step=10),
            Event("outcome", (OLD, "stopped")), Event("exit_code", 0))
    out.append(Cell("stopped", many, id="stopped/checkpoints-9-and-10"))
    # the m3 audit (issue 48): a relaunch that never saved, its outcome.json "succeeded" with its own launch id and
    # exit code 0: the earlier launch's final save in saves.jsonl is not this launch's
    relaunch = (*lineage("succeeded"), Event("run_json", NEW), Event("stdout"), Event("train_begin", NEW),
                Event("progress", step=5), Event("outcome", (NEW, "succeeded")), Event("exit_code", 0))
    out.append(Cell("failed", relaunch, id="failed/relaunch-never-saved-after-an-earlier-success"))
    # a resume that began at step 2 and logged no step after it (its progress log's last line is the earlier
    # attempt's step 2), with a final save of its own: it trained nothing
    idle = (*lineage("stopped"), Event("run_json", NEW), Event("stdout"), Event("train_begin", NEW, step=2),
            Event("final_model", step=4), Event("outcome", (NEW, "succeeded")), Event("exit_code", 0))
    out.append(Cell("failed", idle, id="failed/resumed-at-step-2-no-step-after"))
    # issue 48, round 8 (F1): asked to stop, the trainer recorded its stop at step 2, its save there failed
    # (FileExistsError) and it exited 1: failed, never "stopped ... with a checkpoint saved"
    stopping = lineage("stopping")
    out.append(Cell("failed", (*stopping, Event("stopped", OLD, step=2), *checkpoint(2)[:-1], Event("exit_code", 1)),
                    id="failed/stop-save-failed-exit-1"))
    out.append(Cell("failed", (*stopping, Event("exit_code", 1)), id="failed/asked-to-stop-died-before-its-step-end"))
    # ... and one whose save at the stop is complete, that crashed after it: the stop is what happened
    out.append(Cell("stopped", (*stopping, Event("stopped", OLD, step=2), *checkpoint(2), Event("exit_code", 1)),
                    id="stopped/saved-at-the-stop-then-exit-1"))
    return out


CELLS = cells()


# ---------------------------------------------------------------- building a cell
def write(run_dir: Path, event: Event, t: float, record: dict) -> None:
    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import CHECKPOINT_DIGEST, record_save

    run = Run(run_dir)
    logs = run.logs
    logs.mkdir(parents=True, exist_ok=True)
    if event.member == "verdict":
        run.verdict.parent.mkdir(parents=True, exist_ok=True)
        run.verdict.write_text(json.dumps({"verdict": "pass", "reviewer": "table"}))
    elif event.member == "run_json":
        previous = json.loads(run.run_json.read_text()) if run.run_json.exists() else None
        pid, started = GONE, t
        record.clear()
        record.update({"state": "starting", "pid": pid, "pgid": pid, "create_time": started, "started_ts": started,
                       "cwd": str(run_dir), "launcher": LAUNCHER, "strategy": "single", "num_processes": 1,
                       "config_sha256": hashlib.sha256(run.config.read_bytes()).hexdigest(),
                       "launch_id": event.value})
        if previous is not None:  # resume_training: the history, what it resumes, the end markers cleared
            record.update({"history": [previous], "resumed_from": "checkpoints/checkpoint-2"})
            for marker in (run.stop_request, run.stopped, run.outcome, run.exit_code, run.exit_record, run.train_begin):
                marker.unlink(missing_ok=True)
        run.run_json.write_text(json.dumps(record))
    elif event.member == "stdout":
        with open(run.stdout, "a") as handle:
            handle.write("==== llm-finetuning launch\n")
    elif event.member == "train_begin":
        write_signed(run.train_begin, {"max_steps": 4, "global_step": event.step or 0, "time": t,
                                       "launch_id": event.value})
    elif event.member == "progress":
        append_signed(run.progress, {"step": event.step, "time": t + event.step, "step_time": 1.0, "loss": 0.1,
                                     "reward": 0.5})
    elif event.member == "checkpoint":
        folder = run.checkpoints / f"checkpoint-{event.step}"
        folder.mkdir(parents=True, exist_ok=True)
        if event.file == CHECKPOINT_DIGEST:
            record_save(run, folder, event.step)  # as the run's callback does after the save
        elif event.file == "trainer_state.json":
            (folder / event.file).write_text(json.dumps({"global_step": event.step, "log_history": []}))
        else:
            (folder / event.file).write_bytes(f"{event.file} at step {event.step}".encode())
    elif event.member == "stop_request":
        write_signed(run.stop_request, {"time": t, "launch_id": event.value})
    elif event.member == "stopped":
        write_signed(run.stopped, {"step": event.step, "time": t, "launch_id": event.value})
    elif event.member == "final_model":  # train_and_save: the model, then the trainer's record of the save
        (run.checkpoints / "config.json").write_text("{}")
        (run.checkpoints / "model.safetensors").write_bytes(b"final weights")
        with pytest.MonkeyPatch.context() as mp:  # the trainer tags its records with its launch's id
            mp.setenv("LLM_FINETUNING_LAUNCH_ID", record.get("launch_id", ""))
            record_save(run, run.checkpoints, event.step, final=True)
    elif event.member == "outcome":
        launch_id, state = event.value
        write_signed(run.outcome, {"state": state, "time": t, "launch_id": launch_id})
    elif event.member == "exit_code":
        write_exit(run_dir, event.value, record.get("launch_id"))
    else:
        raise AssertionError(f"the table cannot write {event.member}: give it a writer")


@contextlib.contextmanager
def stand_in_workspace(root: Path):
    """A workspace at `root` (set for the block) with a stand-in base model and a template run of its config, what
    `build` copies a cell's run from: the tables of what a run writes (test_run_files, test_write_targets)."""
    template = make_template(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_FINETUNING_WORKSPACE", str(root))
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        yield template


def build(root: Path, template: Path, cell: Cell) -> Path:
    run_dir = root / "runs" / cell.id.replace("/", "--")
    shutil.copytree(template, run_dir)
    record: dict = {}
    t = time.time() - 3600
    for event in cell.events:
        if cell.variant == "old-markers-kept" and event.member == "run_json" and event.value == NEW:
            kept = {p.name: p.read_bytes() for p in (run_dir / "train" / "logs").glob("*.json")}
            write(run_dir, event, t, record)
            for name, data in kept.items():  # the earlier attempt's stopped.json and outcome.json, back in place
                (run_dir / "train" / "logs" / name).write_bytes(data)
            continue
        write(run_dir, event, t, record)
    folder = run_dir / "checkpoints" / "checkpoint-2"
    if cell.variant == "file-removed":
        (folder / "optimizer.pt").unlink()
    elif cell.variant == "file-truncated":
        (folder / "model.safetensors").write_bytes(b"cut")
    elif cell.variant == "file-added":
        (folder / "adapter_model.safetensors").write_bytes(b"other weights")
    elif cell.variant == "file-replaced":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(bytes(b ^ 1 for b in data))
    elif cell.variant == "digest-rewritten":
        from mcp_server.training.trainer.digest import write_checkpoint_digest

        (folder / "model.safetensors").write_bytes(b"weights the run never wrote")
        write_checkpoint_digest(folder, 2)
    elif cell.variant == "record-lost":
        (run_dir / "run.json").unlink()
    elif cell.variant == "final-unrecorded":  # the ledger loses the final save's line: the model is no one's save
        saves = run_dir / "train" / "logs" / "saves.jsonl"
        lines = saves.read_text().splitlines() if saves.exists() else []
        saves.write_text("".join(line + "\n" for line in lines if '"final": true' not in line))
    return run_dir


# ---------------------------------------------------------------- the contract, in words
def expected(cell: Cell) -> dict:
    """What every door must say about the cell, from what was written (not from the code under test):
    - never launched (no run.json, no logs): not_launched;
    - run.json lost and the process dead: unknown (its logs say neither how it ended nor that it runs);
    - otherwise dead: this launch's outcome decides (succeeded needs exit code 0 or none and this launch's own
      evidence: it began, logged a step and the trainer recorded its final save, else failed; a crash on the way
      out is failed; stopped is stopped); with no outcome, a stop asked or carried out is stopped, anything else
      failed; but a stop whose launcher recorded a non-zero exit is failed unless the checkpoint of the step its
      stopped.json names was saved whole (a save that failed at the stop is no stop). Markers of another launch
      (another launch id) are not this launch's;
    - the checkpoints are those whose every file was written, the trainer's record last, and left as saved, by
      step; the latest of them is what a resume starts from; one changed after its save is never the latest
      (changed in size, a file gone or added, its own digest rewritten) or is refused by resume (same size, other
      bytes);
    - stop: nothing to stop (nothing killed), naming the latest checkpoint;
    - resume: refused (state) when never launched, its record is lost or it succeeded (issue 49: a resume of a
      succeeded run trained past max_steps over its promoted model), (checkpoint) without one or when the latest is
      at max_steps;
    - record_inspection_verdict: refused, naming the launch, on every launched run (its verdict unchanged);
    - promote: judges the output_dir only of a succeeded run (or a model placed in a never-launched one)."""
    events = list(cell.events)
    launched = any(e.member == "run_json" for e in events)
    current = next((e.value for e in reversed(events) if e.member == "run_json"), None)
    since = max((i for i, e in enumerate(events) if e.member == "run_json"), default=-1)
    mine = events[since + 1:] if since >= 0 else events
    outcome = next((e.value[1] for e in reversed(mine) if e.member == "outcome" and e.value[0] == current), None)
    exit_code = next((e.value for e in reversed(mine) if e.member == "exit_code"), None)
    stop_asked = any(e.member in ("stop_request",) for e in mine) or any(
        e.member == "stopped" and e.value == current for e in mine)
    if cell.variant == "old-markers-kept":  # what the markers the table copied back say is another launch's
        stop_asked = False
    # succeeded is borne out by this launch's own evidence: it began, logged a step and the trainer recorded its
    # final save; an outcome.json and an exit code alone are files anyone can write
    evidence = (all(any(e.member == m for e in mine) for m in ("train_begin", "progress", "final_model"))
                and cell.variant != "final-unrecorded")
    if not launched:
        state = "not_launched"
    elif cell.variant == "record-lost":
        state = "unknown"
    elif outcome == "succeeded":
        state = "succeeded" if exit_code in (None, 0) and evidence else "failed"
    elif outcome == "stopped":
        state = "stopped"
    else:
        state = None  # decided below, from the checkpoints
    from mcp_server.training.lifecycle import CHECKPOINT_WRITES

    saved = [e.step for e in events if e.member == "checkpoint" and e.file == CHECKPOINT_WRITES[-1]]
    listed = [s for s in saved if not (s == 2 and cell.variant in ("file-removed", "file-truncated", "file-added",
                                                                   "digest-rewritten"))]
    if state is None:
        stop_step = next((e.step for e in reversed(mine) if e.member == "stopped" and e.value == current), None)
        crashed = exit_code not in (None, 0) and stop_step not in listed
        state = "stopped" if stop_asked and not crashed else "failed"
    latest = f"checkpoint-{listed[-1]}" if listed else None
    if not launched or cell.variant == "record-lost" or state == "succeeded":  # a succeeded run: a new run trains on
        resume = ("refused", "state")
    elif latest is None:
        resume = ("refused", "checkpoint")
    elif cell.variant == "file-replaced" or listed[-1] >= 4:  # max_steps 4 (make_template): never trained past it
        resume = ("refused", "checkpoint")
    else:
        resume = ("from", latest)
    final = any(e.member == "final_model" for e in events)
    if state == "succeeded" or (state == "not_launched" and final):
        promote = "goldens"  # past the state check: no baseline and no goldens given here
    elif state == "not_launched":
        promote = "checkpoint"  # no saved model in output_dir
    else:
        promote = "run"  # refused naming the state
    return {"state": state, "latest": latest, "resume": resume, "promote": promote, "launched": launched}


# ---------------------------------------------------------------- the table
def make_template(root: Path) -> Path:
    """An emitted run's files as the cells start from: a config naming a local base model nothing here loads."""
    base = root / "base-model"
    base.mkdir()
    (base / "config.json").write_text("{}")
    template = root / "template"
    (template / "train").mkdir(parents=True)
    (template / "train" / "config.yaml").write_text(yaml.safe_dump(
        {"model_name_or_path": str(base), "output_dir": "checkpoints", "max_steps": 4, "use_cpu": True}))
    return template


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    with module_workspace(tmp_path_factory, "run-states-ws", CUDA_VISIBLE_DEVICES="") as root:
        template = make_template(root)
        started = time.time()
        built = {cell.id: build(root, template, cell) for cell in CELLS}
        from mcp_server.training.status import list_runs

        listed = {Path(r.run_dir).name: r.state for r in list_runs().runs}
        yield built, listed, started
        print(f"\nrun-state table: {len(CELLS)} cells built in {time.time() - started:.1f} s")


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_each_cell_of_the_run_state_table(cell, table):
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.training.launch import launch_training, resume_training
    from mcp_server.training.models import LaunchRequest, RunRequest, StatusRequest, StopRequest
    from mcp_server.training.status import stop_training, training_status

    built, listed, _ = table
    run_dir = built[cell.id]
    want = expected(cell)

    status = training_status(StatusRequest(run=str(run_dir)))
    assert (status.state, status.alive) == (want["state"], False), (cell.id, status.message)
    assert listed[run_dir.name] == want["state"], cell.id
    names = [Path(p).name for p in status.checkpoints]
    assert (names[-1] if names else None) == want["latest"], (cell.id, names)

    stop = stop_training(StopRequest(run=str(run_dir), timeout_s=0, kill=True))
    assert not stop.killed and not stop.graceful and stop.error is None and "nothing to stop" in stop.message, cell.id
    assert (Path(stop.checkpoint).name if stop.checkpoint else None) == want["latest"], cell.id

    kind, what = want["resume"]
    if kind == "refused":
        resumed = resume_training(RunRequest(run=str(run_dir)))
        assert not resumed.launched and [r.gate for r in resumed.refusals][:1] == [what], (cell.id, resumed.message)
    else:  # what a resume starts from, as the launch refusal names it (a resume itself would run every gate)
        again = launch_training(LaunchRequest(run=str(run_dir)))
        assert not again.launched and f"(latest checkpoint {what})" in again.refusals[0].message, cell.id

    # record_inspection_verdict: a launched run's verdict and kept reward code are never rewritten (issue 49)
    from mcp_server.inspection.gate import record_inspection_verdict
    from mcp_server.inspection.models import VerdictRequest

    verdict = run_dir / "inspection" / "verdict.json"
    before = verdict.read_bytes() if verdict.exists() else None
    with pytest.raises(UserInputError) as recorded:
        record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="table",
                                                 agree_with_rest=True))
    if want["launched"]:
        assert recorded.value.field == "run" and "is launched" in str(recorded.value), (cell.id, str(recorded.value))
    else:
        assert "is launched" not in str(recorded.value), cell.id
    assert (verdict.read_bytes() if verdict.exists() else None) == before, cell.id

    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert refused.value.field == want["promote"], (cell.id, str(refused.value))
    if want["promote"] == "run":
        assert f"is {want['state']}, not succeeded" in str(refused.value)


def test_every_phase_write_and_state_has_a_row():
    """A phase, a write of a launch, a checkpoint's file or a run state the table does not reach fails here: the
    table is generated from training/lifecycle.py, so a declaration without a row is a gap to fill."""
    from mcp_server.runs import Run
    from mcp_server.training.lifecycle import CHECKPOINT_WRITES, LAUNCH_WRITES, PHASES, SCHEDULER_STATES
    from mcp_server.training.models import RunState

    assert {c.phase for c in CELLS} == set(PHASES)
    written = [e.member for c in CELLS for e in c.events]
    for member, _ in LAUNCH_WRITES:
        assert member in written, f"no cell writes {member}"
        assert member in ("checkpoint", "final_model") or isinstance(getattr(Run, member, None), property), member
    for name in CHECKPOINT_WRITES:  # a save cut right after each of its files
        assert any(c.events and c.events[-1].file == name for c in CELLS), name
    live = ("starting", "running", "stopping")  # a process alive: tests/test_run_stop.py
    reached = {expected(c)["state"] for c in CELLS}
    missing = set(typing.get_args(RunState)) - reached - set(live) - set(SCHEDULER_STATES)
    assert not missing, f"run states without a row: {sorted(missing)}"
    assert len(CELLS) >= 40, len(CELLS)


@pytest.mark.parametrize("step_times, ago, wait", [
    ((), None, 120.0),  # no step logged yet: the least wait, then the run is left stopping (never killed)
    ((2.0, 3.0), 1.0, 120.0),  # fast steps: the least wait covers the save
    ((200.0, 420.0, 180.0), 10.0, 410.0 + 210.0 + 60.0),  # a CPU run's 3-7 minute steps (issue 49): the longest
    ((3000.0,), 0.0, 900.0),  # at most 15 minutes, then stopping
])
def test_a_stop_waits_as_long_as_the_runs_logged_steps_take(tmp_path, step_times, ago, wait):
    """The default wait of stop_training: the current step's expected end from the run's own progress log (its
    longest recent step_time after the last logged step), half a step more and a minute for the save."""
    from mcp_server.runs import Run
    from mcp_server.training.stopping import stop_wait

    run = Run(tmp_path / "run")
    run.logs.mkdir(parents=True)
    now = 1_000_000.0
    write_signed_lines(run.progress, [{"step": i + 1, "time": now - ago, "step_time": t}
                                      for i, t in enumerate(step_times)])
    waited, step = stop_wait(run, now=now)
    assert waited == pytest.approx(wait) and step == (max(step_times) if step_times else None)


def test_a_guard_stopped_run_never_resumes_from_the_checkpoint_saved_at_its_failing_step(tmp_path, monkeypatch):
    """The guard stopped the run at step 2 and the stop saved checkpoint-2 (it holds the failure): a patched resume
    starts from the last checkpoint saved before the stop's step, and with none refuses (gate checkpoint) saying
    why, never from the checkpoint at the failing step."""
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    events = (*lineage("launching"), Event("train_begin", OLD), Event("progress", step=1), Event("progress", step=2),
              Event("stopped", OLD, step=2), *checkpoint(2), Event("outcome", (OLD, "stopped")), Event("exit_code", 0))
    run_dir = build(tmp_path, make_template(tmp_path), Cell("stopped", events, id="stopped/by-guard"))
    stopped = run_dir / "train" / "logs" / "stopped.json"
    write_signed(stopped, {**json.loads(stopped.read_text()), "by": "guard", "code": "entropy_collapse"})
    resumed = resume_training(RunRequest(run=str(run_dir), patch={"learning_rate": 1e-7}))
    assert not resumed.launched and [r.gate for r in resumed.refusals] == ["checkpoint"], resumed.message
    assert "the guard stopped at step 2" in resumed.refusals[0].message, resumed.refusals[0].message


# run.json damaged so that it names no launch (the m3 audit, issue 48): a pid 0 (a signal to pid 0 reaches the
# server's own process group), a negative pid, a link to nothing. Each is an error naming the file, never a launch
# record and never "not launched".
BAD_RECORDS = {"pid 0": {"pid": 0}, "pgid 0": {"pgid": 0}, "pid -1": {"pid": -1}, "a link to nothing": None,
               # edited by hand to a value that only coerces to a pid (m5-runs-run-json-lax-types)
               "pid true": {"pid": True}, "pid as text": {"pid": "1234"}}


@pytest.mark.parametrize("bad", list(BAD_RECORDS))
def test_a_run_json_that_names_no_launch_is_named_by_status_and_stop(tmp_path, bad):
    """training_status raises naming the file; stop-training (the CLI) exits 2 naming it."""
    from mcp_server.errors import UserInputError
    from mcp_server.runs import Run
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    run_dir = make_template(tmp_path)
    run = Run(run_dir)
    write(run_dir, Event("run_json", OLD), time.time(), {})
    if BAD_RECORDS[bad] is None:
        run.run_json.unlink()
        run.run_json.symlink_to(tmp_path / "gone.json")
    else:
        record = json.loads(run.run_json.read_text())
        run.run_json.write_text(json.dumps({**record, **BAD_RECORDS[bad]}))
    with pytest.raises(UserInputError, match="run.json is not a launch record"):
        training_status(StatusRequest(run=str(run_dir)))
    from conftest import cli_here

    stop = cli_here("stop-training", str(run_dir))  # never a signal: the record is refused before any pid is read
    assert stop.returncode == 2 and "run.json is not a launch record" in stop.stderr, (bad, stop.stderr)


# ---------------------------------------------------------------- the m4 audit (issue 48): the edges of each door
# Each row is one cell of the table above (built by `build`), changed where the row's edge is, and asked through
# the core API. The mutation each row kills is named in bench/mutate.py (m4-runs-*, x5-runs-*).
def _cell(tmp_path, monkeypatch, phase: str, events=None, tweak=None) -> Path:
    """A cell of `phase` (its lineage, or `events`) in a workspace at tmp_path; `tweak(run)` changes its files."""
    from mcp_server.runs import Run

    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    run_dir = build(tmp_path, make_template(tmp_path), Cell(phase, tuple(events or lineage(phase)), id=phase))
    if tweak is not None:
        tweak(Run(run_dir))
    return run_dir


def _status(run_dir: Path, **kw):
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    return training_status(StatusRequest(run=str(run_dir), plot=False, **kw))


def _progress(run, rows: list[dict]) -> None:
    """train/logs/progress.jsonl holding `rows`, each signed as the trainer appends it."""
    run.progress.write_text("")
    for row in rows:
        append_signed(run.progress, row)


@pytest.mark.parametrize("log_lines, want", [
    (0, []),  # no log wanted: none (m4-runs-log-tail-zero-lines)
    (2, ["two, its last redraw", "three"]),  # the LAST lines, a progress bar's carriage returns folded, blanks out
    (500, ["==== llm-finetuning launch", "one", "two, its last redraw", "three"]),  # fewer than asked: all of them
])
def test_status_log_tail_is_the_last_lines_asked_for(tmp_path, monkeypatch, log_lines, want):
    def tweak(run):
        with open(run.stdout, "a") as handle:
            handle.write("one\n\ntwo 10%\rtwo 50%\rtwo, its last redraw\n   \nthree\r\n")

    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=tweak), log_lines=log_lines)
    assert status.state == "stopped" and status.log_tail == want, status.log_tail


def _log_linked(form: str):
    """train/logs/stdout.log reached through a link of `form`: another run's log outside this run (the file alone,
    or the whole train/logs folder), a link loop, or a copy inside the run."""
    def tweak(run):
        other = run.dir.parent / "other-run-logs" if form != "inside the run" else run.dir / "kept-logs"
        other.mkdir()
        (other / "stdout.log").write_text("Writing model shards of another run\n")
        if form == "logs folder linked out":
            for entry in run.logs.iterdir():  # the other run's stdout.log stays; this run's other files move along
                if entry.name != "stdout.log":
                    entry.rename(other / entry.name)
            run.stdout.unlink()
            run.logs.rmdir()
            run.logs.symlink_to(other, target_is_directory=True)
            return
        run.stdout.unlink()
        if form == "a link loop":
            run.stdout.symlink_to(run.stdout.name)
        else:
            run.stdout.symlink_to(other / "stdout.log")
    return tweak


@pytest.mark.parametrize("form", ["stdout.log linked out", "logs folder linked out", "a link loop",
                                  "inside the run"])
def test_status_never_shows_another_runs_log_through_a_link(tmp_path, monkeypatch, form):
    """Round 13, N2: training_status showed the last line of a stdout.log read through a link (the logs folder
    linked to another run's), which every other reader of the run's logs refuses: it says where the link leads
    and shows none of its lines; a link that stays inside the run is read."""
    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=_log_linked(form)), log_lines=5)
    if form == "inside the run":
        assert status.log_tail == ["Writing model shards of another run"], status.log_tail
        return
    assert len(status.log_tail) == 1 and "leads outside the run directory" in status.log_tail[0], status.log_tail
    assert not any("another run" in line for line in status.log_tail), status.log_tail


def test_a_failed_runs_status_shows_at_least_twenty_log_lines(tmp_path, monkeypatch):
    """A failed run's cause is in its log: training_status shows its last 20 lines even when fewer are asked."""
    def tweak(run):
        with open(run.stdout, "a") as handle:
            handle.write("".join(f"line {i}\n" for i in range(30)))

    events = [*lineage("running"), Event("exit_code", 1)]
    status = _status(_cell(tmp_path, monkeypatch, "failed", events, tweak), log_lines=1)
    assert status.state == "failed" and status.log_tail == [f"line {i}" for i in range(10, 30)], status.log_tail
    assert status.exit_code == 1 and "exit code 1" in status.message and "last log line: line 29" in status.message


@pytest.mark.parametrize("ended_by", ["outcome", "last-step", "started-only"])
def test_an_ended_runs_elapsed_time_stops_at_its_end(tmp_path, monkeypatch, ended_by):
    """elapsed_s of a run that ended an hour ago: from its start to its outcome's time, else its last logged step's,
    else 0; never the time since it started (m4-runs-elapsed-ended-grows)."""
    def tweak(run):
        started = json.loads(run.run_json.read_text())["started_ts"]
        if ended_by == "outcome":
            write_signed(run.outcome, {**json.loads(run.outcome.read_text()), "time": started + 20.0})
        else:
            run.outcome.unlink()
            _progress(run, [{"step": 1, "time": started + 5.0, "loss": 0.1},
                            {"step": 2, "time": started + 12.5, "loss": 0.1}] if ended_by == "last-step" else [])
    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=tweak))
    assert status.state == "stopped" and not status.alive
    assert status.elapsed_s == {"outcome": 20.0, "last-step": 12.5, "started-only": 0.0}[ended_by], status.elapsed_s


def test_list_runs_and_status_name_the_last_logged_step(tmp_path, monkeypatch):
    """A progress log of several lines: list_runs and training_status show its LAST step, not its first; a last
    line without a step (a half-written line) is passed over (m4-runs-last-progress-first-line)."""
    from mcp_server.training.status import list_runs

    def tweak(run):
        _progress(run, [{"step": s, "time": 1.0 + s, "loss": 0.1} for s in (1, 2, 3)])
        with open(run.progress, "a") as handle:
            handle.write('{"step": 4, "loss"')  # a live run's line cut short
    run_dir = _cell(tmp_path, monkeypatch, "running", tweak=tweak)
    listed = {Path(r.run_dir).name: r for r in list_runs().runs}[run_dir.name]
    assert (listed.step, listed.max_steps) == (3, 4), listed
    assert _status(run_dir).step == 3


def test_a_progress_line_without_a_step_after_the_last_step_is_no_failure(tmp_path, monkeypatch):
    """A succeeded run whose progress log ends with a line that holds no step (a note, a summary): the success
    check reads the last line WITH a step, and the run is still succeeded."""
    def tweak(run):
        append_signed(run.progress, {"time": 1.0, "train_runtime": 12.0})
    status = _status(_cell(tmp_path, monkeypatch, "succeeded", tweak=tweak))
    assert status.state == "succeeded", status.message


@pytest.mark.parametrize("begin, want", [(6, 6), (0, 4), (None, 4)])
def test_max_steps_is_training_begins_else_the_configs(tmp_path, monkeypatch, begin, want):
    """max_steps as training began with it (train-begin.json: a resume may extend it), else the config's 4."""
    def tweak(run):
        if begin is None:
            run.train_begin.unlink()
        else:
            write_signed(run.train_begin, {**json.loads(run.train_begin.read_text()), "max_steps": begin})
    run_dir = _cell(tmp_path, monkeypatch, "stopped", tweak=tweak)
    from mcp_server.training.status import list_runs

    assert _status(run_dir).max_steps == want
    assert {Path(r.run_dir).name: r for r in list_runs().runs}[run_dir.name].max_steps == want


@pytest.mark.parametrize("times, want", [
    ((100.0, 100.0, 1, 2, 3, 4, 5, 6, 7, 8, 30), 1 / 5),  # the median of the latest 9 step times (not 10, not mean)
    ((20.0,) * 9 + (300.0,) * 9, 1 / 300.0),  # steps that slowed: the latest times, not the first 9
    ((300.0,) * 9 + (20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0), 1 / 24.0),  # ... and sped up
    ((4, 1, 2, 3), 1 / 2.5),  # an even count: the mean of the middle two
    ((1.0, 1.0, 10.0), 1 / 1.0),  # one slow step (a save) is not the rate
    ((0, -1, 2.0), 1 / 2.0),  # zero and negative times are no step times
])
def test_steps_per_second_is_the_median_of_the_latest_step_times(tmp_path, monkeypatch, times, want):
    def tweak(run):
        _progress(run, [{"step": i + 1, "time": 1000.0 + i, "step_time": t, "loss": 0.1} for i, t in enumerate(times)])
    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=tweak))
    assert status.steps_per_s == pytest.approx(want, abs=1e-5), status.steps_per_s


def test_steps_per_second_without_step_times_counts_only_this_launch(tmp_path, monkeypatch):
    """Without step times: steps over time of the lines logged since this launch started (a pause before a resume
    is not speed)."""
    def tweak(run):
        started = json.loads(run.run_json.read_text())["started_ts"]
        _progress(run, [{"step": 1, "time": started - 5000.0, "loss": 0.1}, {"step": 2, "time": started + 10.0,
                        "loss": 0.1}, {"step": 4, "time": started + 20.0, "loss": 0.1}])
    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=tweak))
    assert status.steps_per_s == pytest.approx(0.2), status.steps_per_s


def test_a_stop_waits_from_the_latest_logged_step(tmp_path):
    """stop_training's default wait counts from the time of the LAST of the latest logged steps, not the first
    (m4-runs-stop-wait-window-start); with no step logged, from train-begin.json's time."""
    from mcp_server.runs import Run
    from mcp_server.training.stopping import stop_wait

    run = Run(tmp_path / "run")
    run.logs.mkdir(parents=True)
    now = 1_000_000.0
    _progress(run, [{"step": 1, "time": now - 500.0, "step_time": 200.0}, {"step": 2, "time": now - 10.0,
                                                                           "step_time": 200.0}])
    assert stop_wait(run, now=now) == (pytest.approx(190.0 + 100.0 + 60.0), 200.0)
    # the step times of a progress log whose lines carry no time: from training's start
    _progress(run, [{"step": 1, "step_time": 300.0}])
    write_signed(run.train_begin, {"time": now - 100.0})
    assert stop_wait(run, now=now) == (pytest.approx(200.0 + 150.0 + 60.0), 300.0)


def test_an_ended_runs_state_is_written_back_to_run_json(tmp_path, monkeypatch):
    """training_status records the derived state (and the exit code) in run.json, so a plain reader sees it."""
    events = [*lineage("running"), Event("exit_code", 1)]
    run_dir = _cell(tmp_path, monkeypatch, "failed", events)
    assert json.loads((run_dir / "run.json").read_text())["state"] == "starting"
    assert _status(run_dir).state == "failed"
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["state"], record["exit_code"]) == ("failed", 1), record


def test_a_final_save_short_of_max_steps_is_no_success(tmp_path, monkeypatch):
    """outcome.json says succeeded, exit code 0, the trainer's final save recorded, but at step 3 of the 4 training
    began with: failed, naming the shortfall."""
    events = [e if e.member != "final_model" else Event("final_model", step=3) for e in lineage("succeeded")]
    status = _status(_cell(tmp_path, monkeypatch, "succeeded", events))
    assert status.state == "failed", status.message


def test_checkpoint_folders_not_named_by_a_step_are_not_checkpoints(tmp_path, monkeypatch):
    """checkpoint-best (a copy a person made, even one recorded in saves.jsonl) is never listed, and never breaks
    the listing."""
    from mcp_server.training.trainer.digest import record_save

    def tweak(run):
        shutil.copytree(run.checkpoints / "checkpoint-2", run.checkpoints / "checkpoint-best")
        record_save(run, run.checkpoints / "checkpoint-best", 2)
    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=tweak))
    assert [Path(p).name for p in status.checkpoints] == ["checkpoint-1", "checkpoint-2"], status.checkpoints


def test_a_deepspeed_checkpoint_is_complete_without_top_level_weights(tmp_path, monkeypatch):
    """DeepSpeed saves its weights in global_step*/ inside checkpoint-N: that checkpoint is complete, the latest."""
    from mcp_server.training.trainer.digest import record_save

    def tweak(run):
        folder = run.checkpoints / "checkpoint-3"
        (folder / "global_step3").mkdir(parents=True)
        (folder / "global_step3" / "mp_rank_00_model_states.pt").write_bytes(b"deepspeed weights")
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": 3, "log_history": []}))
        record_save(run, folder, 3)
    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=tweak))
    assert [Path(p).name for p in status.checkpoints][-1:] == ["checkpoint-3"], status.checkpoints


@pytest.mark.parametrize("before", ["failed", "succeeded"])
def test_a_relaunch_killed_before_its_exit_code_never_reads_the_earlier_launchs(tmp_path, monkeypatch, before):
    """A relaunch (run.json's new launch id) killed before launch.sh wrote its exit code, the earlier launch's
    signed exit.json and train-begin.json left in train/logs/: training_status names no exit code of its own
    (m5-runs-exit-code-other-launch), never the earlier launch's 1 or 0."""
    events = (*lineage(before), Event("run_json", NEW), Event("stdout"))
    run_dir = build(tmp_path, make_template(tmp_path), Cell("failed", events, "old-markers-kept", id=f"re-{before}"))
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    assert (run_dir / "train" / "logs" / "exit.json").exists()  # the earlier launch's, signed
    status = _status(run_dir)
    assert status.exit_code is None, (status.state, status.exit_code, status.message)


def test_a_record_restored_from_the_live_process_is_written_back(tmp_path, monkeypatch):
    """run.json lost while the run is live: the record the local launcher restores from the live process (state
    running, as run.json said, marked reconstructed) is written back as run.json, marked restored_from_process
    (m5-runs-restored-record-unwritten). The process's reading is constructed here (the launcher's
    process_state(...).record for a live `bash train/launch.sh`): no process starts."""
    from mcp_server.runs import Run
    from mcp_server.training.derived import DerivedState
    from mcp_server.training.runrecord import read_run_json, sync_run_json

    run_dir = _cell(tmp_path, monkeypatch, "running", tweak=lambda run: run.run_json.unlink())
    run = Run(run_dir)
    restored = {"pid": 4242, "pgid": 4242, "create_time": time.time() - 60, "cwd": str(run_dir.resolve()),
                "launcher": "local", "state": "running", "reconstructed": True, "started_ts": time.time() - 60}
    derived = sync_run_json(run, DerivedState(state="running", alive=True, pid=4242, record=restored))
    assert derived.state == "running"
    assert run.run_json.is_file(), "run.json was not written back"
    record = read_run_json(run)
    assert record["restored_from_process"] is True and "reconstructed" not in record, record
    assert (record["state"], record["pid"]) == ("running", 4242), record


# ---------------------------------------------------------------- the k6 audit (issue 48): more edges of each door
# Each row kills one or more k6-runs-* mutations in bench/mutate.py; every run is a cell of the table, changed by
# hand, read through the core API. Nothing trains and no process starts.
def _sub(tmp_path: Path, name: str) -> Path:
    """A fresh folder under tmp_path: a second cell's workspace in one test."""
    (tmp_path / name).mkdir()
    return tmp_path / name


def test_a_step_zero_is_a_logged_step(tmp_path, monkeypatch):
    """A progress line at step 0 (logged before the first update) is step 0 in training_status and list_runs, never
    'no step logged yet' (k6-runs-step-zero-unread)."""
    from mcp_server.training.status import list_runs

    run_dir = _cell(tmp_path, monkeypatch, "stopped",
                    tweak=lambda run: _progress(run, [{"step": 0, "time": 1000.0, "loss": 0.1}]))
    status = _status(run_dir)
    assert status.step == 0 and "step 0/4" in status.message, status.message
    assert {Path(r.run_dir).name: r for r in list_runs().runs}[run_dir.name].step == 0


def test_an_ended_run_has_no_eta_and_no_first_step_estimate(tmp_path, monkeypatch):
    """ETA and the planner's first-step estimate are for a run still training: a stopped run with step times logged
    has no ETA (k6-runs-eta-any-state); a failed run that logged no step has no first-step estimate
    (k6-runs-estimate-any-state)."""
    def times(run):
        _progress(run, [{"step": s, "time": 1000.0 + s, "step_time": 2.0, "loss": 0.1} for s in (1, 2)])
    stopped = _status(_cell(_sub(tmp_path, "a"), monkeypatch, "stopped", tweak=times))
    assert stopped.state == "stopped" and stopped.steps_per_s == pytest.approx(0.5)
    assert stopped.eta_s is None and "ETA" not in stopped.message, stopped.message
    failed = _status(_cell(_sub(tmp_path, "b"), monkeypatch, "failed", [*lineage("launching"), Event("exit_code", 1)]))
    assert failed.state == "failed" and failed.step is None
    assert failed.step_estimate is None and failed.step_estimate_s is None, failed.step_estimate


def test_a_failed_run_that_logged_no_step_is_diagnosed_from_its_log(tmp_path, monkeypatch):
    """A run that died of a CUDA OOM before its first step: training_status's health flags come from its stdout log
    (the failure's cause), never 'no metrics logged yet' (k6-runs-health-failed-no-lines)."""
    def oom(run):
        with open(run.stdout, "a") as handle:
            handle.write("Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to "
                         "allocate 2.00 GiB\n")
    status = _status(_cell(tmp_path, monkeypatch, "failed", [*lineage("launching"), Event("exit_code", 1)], oom))
    assert status.state == "failed" and status.step is None
    assert "cuda_out_of_memory" in [f.code for f in status.health], (status.health, status.health_note)


def test_a_failed_runs_exit_code_zero_is_named(tmp_path, monkeypatch):
    """A launch that exited 0 but whose success is not borne out (no step, no final save) reads failed naming its
    exit code 0, never 'no exit code recorded (killed?)' (k6-runs-failed-exit-zero); run.json records the state and
    the exit code 0 (k6-runs-sync-exit-zero)."""
    events = (*lineage("launching"), Event("outcome", (OLD, "succeeded")), Event("exit_code", 0))
    run_dir = _cell(tmp_path, monkeypatch, "failed", events)
    status = _status(run_dir)
    assert status.state == "failed" and status.exit_code == 0
    assert "(exit code 0)" in status.message and "killed?" not in status.message, status.message
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["state"], record.get("exit_code")) == ("failed", 0), record


def test_a_moved_run_is_still_its_own_run(tmp_path, monkeypatch):
    """run.json written for a directory that no longer exists (the run folder was moved or renamed): the record is
    still this run's (its state from its files: stopped), never read as a copy of another run
    (k6-runs-moved-run-is-copy)."""
    def moved(run):
        record = json.loads(run.run_json.read_text())
        run.run_json.write_text(json.dumps({**record, "cwd": str(tmp_path / "runs" / "old-name")}))
    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=moved))
    assert status.state == "stopped" and "is a copy" not in (status.note or ""), status.message


def test_a_run_with_its_signed_exit_record_has_no_note_about_the_plain_exit_code(tmp_path, monkeypatch):
    """train/logs/exit-code beside the launcher's signed exit.json is not worth a note; only an exit-code without
    exit.json is named as not read (k6-runs-plain-exit-code-note-always)."""
    status = _status(_cell(_sub(tmp_path, "a"), monkeypatch, "stopped"))
    assert status.state == "stopped" and "is not read" not in (status.note or ""), status.note

    def unsigned(run):
        run.exit_record.unlink()
    status = _status(_cell(_sub(tmp_path, "b"), monkeypatch, "stopped", tweak=unsigned))
    assert "exit-code is not read" in (status.note or ""), status.note


def test_a_checkpoint_is_complete_by_its_fsdp_or_adapter_folder_and_never_without_trainer_state(tmp_path,
                                                                                               monkeypatch):
    """FSDP saves its weights in pytorch_model_fsdp_0/ (k6-runs-fsdp-not-complete), PEFT a named adapter in its own
    folder (k6-runs-adapter-folder-not-complete): each recorded checkpoint is complete, the latest. A recorded
    folder with weights but no trainer_state.json is no checkpoint a resume can load
    (k6-runs-no-trainer-state-complete)."""
    from mcp_server.training.trainer.digest import record_save

    def save(run, step, folder, state=True):
        path = run.checkpoints / f"checkpoint-{step}"
        (path / folder).mkdir(parents=True)
        (path / folder / "weights.bin").write_bytes(b"sharded weights")
        (path / folder / "adapter_model.safetensors").write_bytes(b"adapter") if folder == "default" else None
        if state:
            (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
        record_save(run, path, step)

    for i, (folder, state, want) in enumerate([("pytorch_model_fsdp_0", True, "checkpoint-3"),
                                               ("default", True, "checkpoint-3"), ("weights", False, "checkpoint-2")]):
        def tweak(run):
            save(run, 3, folder, state)
            if not state:
                (run.checkpoints / "checkpoint-3" / "model.safetensors").write_bytes(b"weights")
                record_save(run, run.checkpoints / "checkpoint-3", 3)
        status = _status(_cell(_sub(tmp_path, str(i)), monkeypatch, "stopped", tweak=tweak))
        assert [Path(p).name for p in status.checkpoints][-1:] == [want], (folder, status.checkpoints)


def test_a_save_that_is_not_the_final_one_never_bears_out_success(tmp_path, monkeypatch):
    """outcome.json succeeded, exit code 0, steps logged to max_steps and a checkpoint at step 4 recorded by this
    launch, but no final save of the model: failed (k6-runs-any-save-final)."""
    def no_final(run):
        saves = [json.loads(line) for line in run.saves.read_text().splitlines()]
        run.saves.write_text("")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LLM_FINETUNING_LAUNCH_ID", OLD)
            from mcp_server.training.trainer.digest import record_save

            for line in saves:
                if not line.get("final"):
                    record_save(run, run.resolve(line["save"]), line["step"])
            record_save(run, run.checkpoints / "checkpoint-2", 4)
    status = _status(_cell(tmp_path, monkeypatch, "succeeded", tweak=no_final))
    assert status.state == "failed" and "no final save" in status.message, status.message


@pytest.mark.parametrize("step_times, ago, wait", [
    ((200.0,), 1000.0, 100.0 + 60.0),  # the step is overdue: half a step and the save from now, never less
])
def test_an_overdue_step_still_gets_half_a_step_and_the_save(tmp_path, step_times, ago, wait):
    """A stop asked when the current step is already past its expected end waits half a step and the save from
    now (k6-runs-stop-wait-overdue-negative)."""
    test_a_stop_waits_as_long_as_the_runs_logged_steps_take(tmp_path, step_times, ago, wait)


def test_a_stops_result_names_the_latest_checkpoint(tmp_path, monkeypatch):
    """What a stop says after it: killed, the steps since the LATEST checkpoint are lost and that checkpoint is the
    result's (k6-runs-stop-killed-first-checkpoint, k6-runs-stop-result-first-checkpoint); a stop whose request
    could not be written says so (k6-runs-stop-unasked-unsaid); a stop at step 0 names step 0
    (k6-runs-stop-saved-step-zero)."""
    from mcp_server.runs import Run
    from mcp_server.training.derived import DerivedState
    from mcp_server.training.stopping import stop_result

    run = Run(_cell(tmp_path, monkeypatch, "stopped"))
    config = yaml.safe_load(run.config.read_text())
    killed = stop_result(run, DerivedState(state="failed", alive=False), config, graceful=False, killed=True,
                         waited=5.0, timeout_s=5.0, note="")
    assert Path(killed.checkpoint).name == "checkpoint-2" and "since checkpoint-2 are lost" in killed.error, killed
    unasked = stop_result(run, DerivedState(state="running", alive=True), config, graceful=False, killed=False,
                          waited=5.0, timeout_s=5.0, note="", asked=False)
    assert "could not be written" in unasked.message, unasked.message
    write_signed(run.stopped, {**json.loads(run.stopped.read_text()), "step": 0})
    from mcp_server.training.trainer.digest import record_save  # its save at step 0, recorded as the callback does
    shutil.copytree(run.checkpoints / "checkpoint-2", run.checkpoints / "checkpoint-0")
    record_save(run, run.checkpoints / "checkpoint-0", 0)
    stopped = stop_result(run, DerivedState(state="stopped", alive=False), config, graceful=True, killed=False,
                          waited=5.0, timeout_s=5.0, note="")
    assert "stopped at step 0 with a checkpoint saved" in stopped.message, stopped.message


def test_a_damaged_run_json_of_a_live_run_is_no_error(tmp_path, monkeypatch):
    """run.json damaged while the run's launcher is alive: the state is read from the live launcher (its record
    restored), never the damaged file's error (k6-runs-damaged-live-raises). The launcher's reading is constructed
    (process_state for a live `bash train/launch.sh`): no process starts."""
    from mcp_server.runs import Run
    from mcp_server.training.derived import DerivedState
    from mcp_server.training.runrecord import derive_with

    run = Run(_cell(tmp_path, monkeypatch, "running", tweak=lambda run: run.run_json.write_text("{not json")))
    live = {"pid": 4242, "cwd": str(run.dir), "state": "running", "reconstructed": True}
    seen = []

    def reading(run, record):
        seen.append(record)
        return DerivedState(state="running", alive=True, pid=4242, record=live)
    assert derive_with(run, reading).state == "running" and seen == [None]
    with pytest.raises(Exception, match="run.json is not a launch record"):  # no live launcher: the file is named
        derive_with(run, lambda run, record: DerivedState(state="failed", alive=False))


def test_a_guard_stop_is_named_only_on_a_stopped_run(tmp_path, monkeypatch):
    """guard.json's stop record is named in a STOPPED run's status; a run that failed afterwards (the stop's save
    crashed, exit code 1) says it failed, never 'stopped by the guard' (k6-runs-guard-stop-any-state)."""
    def guarded(run):  # the guard's record as the trainer signs it, for this launch
        write_signed(run.guard, {"stopped": {"code": "nan_loss", "step": 2, "save": True}, "findings": [],
                                 "launch_id": json.loads(run.run_json.read_text())["launch_id"]})
    stopped = _status(_cell(_sub(tmp_path, "a"), monkeypatch, "stopped", tweak=guarded))
    assert stopped.state == "stopped" and "stopped by the guard: nan_loss at step 2" in stopped.message
    failed = _status(_cell(_sub(tmp_path, "b"), monkeypatch, "failed", [*lineage("running"), Event("exit_code", 1)],
                           guarded))
    assert failed.state == "failed" and "stopped by the guard" not in failed.message, failed.message


def test_a_lost_run_json_with_a_signed_exit_record_is_no_never_launched_run(tmp_path, monkeypatch):
    """run.json and stdout.log removed, the launcher's signed exit.json (exit code 0) left: the run was launched and
    how it ended is unknown, never 'not launched' (k6-runs-exit-zero-no-log-unlaunched)."""
    def lost(run):
        run.run_json.unlink()
        run.stdout.unlink()
        run.outcome.unlink()
        run.stopped.unlink()
        run.stop_request.unlink()
    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=lost))
    assert status.state == "unknown" and status.exit_code == 0, (status.state, status.message)


def test_a_hand_written_train_begin_never_bears_out_success(tmp_path, monkeypatch):
    """A succeeded run whose train-begin.json was rewritten by hand (same fields, no signature: the launcher's key
    is outside the workspace): the run's own evidence no longer shows that training began, so it reads failed
    naming the file, never succeeded on an unsigned record (k6-runs-begin-unsigned)."""
    def unsigned(run):
        fields = ("max_steps", "global_step", "time", "launch_id")  # what the trainer writes, its signature left out
        signed = json.loads(run.train_begin.read_text())
        run.train_begin.write_text(json.dumps({k: signed[k] for k in fields}))
    status = _status(_cell(tmp_path, monkeypatch, "succeeded", tweak=unsigned))
    assert status.state == "failed" and "no train-begin.json of this launch" in status.message, status.message


def test_a_hand_written_stopped_marker_never_turns_a_failed_run_stopped(tmp_path, monkeypatch):
    """A run that crashed (exit code 1) with a stopped.json written by hand (this launch's id, no signature): the
    marker is no one's, the run failed (k6-runs-marker-unsigned)."""
    def forged(run):
        run.stopped.write_text(json.dumps({"step": 2, "time": time.time(), "launch_id": OLD}))
    status = _status(_cell(tmp_path, monkeypatch, "failed", [*lineage("running"), Event("exit_code", 1)], forged))
    assert status.state == "failed", (status.state, status.message)


def test_a_hand_written_progress_line_never_bears_out_a_resume_that_trained_nothing(tmp_path, monkeypatch):
    """A resume that began at step 2 and logged no step after it, its success claimed by outcome.json, exit code 0
    and a final save: a progress line appended by hand (step 3, no signature) is no step logged, and the run reads
    failed (k6-runs-logged-step-unsigned)."""
    events = (*lineage("stopped"), Event("run_json", NEW), Event("stdout"), Event("train_begin", NEW, step=2),
              Event("final_model", step=4), Event("outcome", (NEW, "succeeded")), Event("exit_code", 0))

    def forged(run):
        with open(run.progress, "a") as handle:
            handle.write(json.dumps({"step": 3, "time": time.time(), "loss": 0.1}) + "\n")
    status = _status(_cell(tmp_path, monkeypatch, "failed", events, forged))
    assert status.state == "failed" and "no step logged" in status.message, status.message


# ---------------------------------------------------------------- round 8 (issue 48): a stop's save, a resume's skip
def test_a_save_that_failed_at_the_stop_is_named_by_status(tmp_path, monkeypatch):
    """F1: stop_training asked, the trainer recorded its stop at step 2, then its save there failed (checkpoint-2 a
    plain file: FileExistsError) and launch.sh signed exit 1: training_status says failed, naming the failed save
    and the trainer's error, never "stopped"."""
    def tweak(run):
        (run.checkpoints / "checkpoint-2").write_text("")
        with open(run.stdout, "a") as handle:
            handle.write("Traceback (most recent call last):\nFileExistsError: [Errno 17] File exists: "
                         "'checkpoints/checkpoint-2'\n")
    events = (*lineage("stopping"), Event("stopped", OLD, step=2), Event("exit_code", 1))
    status = _status(_cell(tmp_path, monkeypatch, "failed", events, tweak))
    assert (status.state, status.exit_code) == ("failed", 1), status.message
    assert "the checkpoint save at the stop failed: it stopped at step 2 but checkpoint-2 was never recorded as " \
           "saved" in status.message and "FileExistsError: [Errno 17]" in status.message, status.message


def test_resume_names_the_checkpoint_it_passes_over_and_why(tmp_path, monkeypatch):
    """A file added to the latest checkpoint (checkpoint-2) after its save: resume never loads it, and its answer
    names it and why (round 8: it quietly continued from checkpoint-1). Refused here for a changed config, so no
    gate starts anything: the answer is the same either way."""
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    def tweak(run):
        (run.checkpoints / "checkpoint-2" / "extra.bin").write_bytes(b"not the run's")
        run.config.write_text(run.config.read_text() + "# edited\n")
    run_dir = _cell(tmp_path, monkeypatch, "stopped", tweak=tweak)
    resumed = resume_training(RunRequest(run=str(run_dir)))
    assert not resumed.launched and [r.gate for r in resumed.refusals] == ["config_hash"], resumed.message
    assert resumed.skipped_checkpoints == ["checkpoint-2 (extra.bin was not written by the save)"], resumed
    assert "passed over" in resumed.message and "checkpoint-2 (extra.bin was not written" in resumed.message


# ---------------------------------------------------------------- the m6 audit (issue 48): survivors' rows
@pytest.mark.parametrize("damage", ["removed", "cut short"])
def test_a_succeeded_runs_final_model_damaged_after_its_save_is_no_success(tmp_path, monkeypatch, damage):
    """A succeeded cell (signed outcome, exit code 0, the trainer's final save recorded) whose final model in
    output_dir was removed or cut short after the trainer recorded it: training_status never reads succeeded, since
    promote_checkpoint and a resume would find no loadable model (m6-runs-final-save-files-unchecked)."""
    def tweak(run):
        weights = run.checkpoints / "model.safetensors"
        if damage == "removed":
            weights.unlink()
        else:
            weights.write_bytes(weights.read_bytes()[:3])
    assert _status(_cell(tmp_path, monkeypatch, "succeeded")).state == "succeeded"  # the cell, undamaged
    (tmp_path / "damaged").mkdir()
    status = _status(_cell(tmp_path / "damaged", monkeypatch, "succeeded", tweak=tweak))
    assert status.state != "succeeded", (status.state, status.message)
    assert "model.safetensors" in (status.message or ""), status.message


# ---------------------------------------------------------------- the m8 audit (issue 48): tables of boundaries
# Each table's rows are generated from the boundaries of the comparison the door makes, not from one incident.

# training_status's log_tail reads the log's last 256 KiB (runstate.log_tail), room for the most lines
# StatusRequest allows (500) of up to 523 bytes: sizes below, at and above that window, long and short lines,
# one line, the default 20 and the most.
LOG_WINDOW = 256 * 1024


def _log_lines_max() -> int:
    from mcp_server.training.models import StatusRequest

    return next(m.le for m in StatusRequest.model_fields["log_lines"].metadata if hasattr(m, "le"))


TAIL_ROWS = [(n, width, size) for n in (1, 20, "most") for width in (8, LOG_WINDOW // 500 - 1)
             for size in (LOG_WINDOW - 1, LOG_WINDOW, LOG_WINDOW + 1, 4 * LOG_WINDOW)]


@pytest.mark.parametrize(("n", "width", "size"), TAIL_ROWS, ids=[f"{n}-lines-of-{w}-bytes-log-{s}" for n, w, s in
                                                                 TAIL_ROWS])
def test_the_log_tail_is_the_last_lines_whole_at_every_size_of_log(tmp_path, monkeypatch, n, width, size):
    """A log of `size` bytes of numbered lines `width` bytes long: log_tail is its last `n` lines, each whole."""
    n = _log_lines_max() if n == "most" else n
    written: list[str] = []

    def tweak(run):
        room = size - run.stdout.stat().st_size
        count, rest = divmod(room, width + 1)
        written.extend(f"{i:0{width}d}" for i in range(count))
        with open(run.stdout, "a") as handle:
            handle.write(("-" * (rest - 1) + "\n" if rest else "") + "".join(line + "\n" for line in written))
        assert run.stdout.stat().st_size == size

    status = _status(_cell(tmp_path, monkeypatch, "stopped", tweak=tweak), log_lines=n)
    assert status.log_tail == written[-n:], (len(status.log_tail), status.log_tail[:2])


# The exception lines a log ends with (runrecord.ERROR_LINE: a name ending in Error, Exception, Interrupt or Exit,
# dotted or not), between the lines a traceback holds that name none.
EXCEPTION_LINES = ("FileExistsError: [Errno 17] File exists: 'checkpoints/checkpoint-2'",
                   "torch.OutOfMemoryError: CUDA out of memory.", "KeyboardInterrupt", "SystemExit: 1",
                   "ValueError: handled earlier", "safetensors.SafetensorError: Error while serializing",
                   "Exception: a plain one")
NOISE = ("Saving model checkpoint to checkpoints/checkpoint-2", "Traceback (most recent call last):",
         '  File "train/train.py", line 80, in <module>', "During handling of the above exception, another exception "
         "occurred:", "")


def _error_logs() -> dict[str, tuple[str, str | None]]:
    """row -> (the log's text after the launch header, the exception line status must name: the LAST one)."""
    rows = {}
    for count in (1, 2, 3):
        for first in range(len(EXCEPTION_LINES)):
            names = [EXCEPTION_LINES[(first + i) % len(EXCEPTION_LINES)] for i in range(count)]
            for after in (0, 1, len(NOISE)):  # the last exception line last, or followed by traceback lines
                text = "".join(f"{NOISE[(i + j) % len(NOISE)]}\n{name}\n" for i, name in enumerate(names)
                               for j in range(2)[:1]) + "".join(f"{line}\n" for line in NOISE[:after])
                rows[f"{count}-from-{first}-then-{after}-lines"] = (text, names[-1])
    long = "RuntimeError: " + "x" * 400
    rows["longer than 300 characters"] = (f"{long}\n", long[:300])
    span = 65536  # runrecord.last_error_line reads the log's last 64 KiB
    line = EXCEPTION_LINES[0]
    for where, gap in {"starts where the read starts": span - len(line) - 1,
                       "ends just before it": span}.items():
        rows[f"the only exception line {where}"] = (f"{line}\n" + "." * (gap - 1) + "\n",
                                                    line if gap < span else None)
    rows["straddles where the read starts"] = (f"{line}\n" + "." * (span - len(line)) + "\n", None)
    return rows


ERROR_LOGS = _error_logs()


@pytest.mark.parametrize("row", list(ERROR_LOGS))
def test_a_failed_stop_names_the_last_exception_line_of_its_log(tmp_path, monkeypatch, row):
    """A stop whose save failed (checkpoint-2 a file, exit 1): training_status names the log's last exception line,
    whole (cut at 300 characters), whatever came before it; none when the last 64 KiB hold none whole."""
    text, named = ERROR_LOGS[row]

    def tweak(run):
        (run.checkpoints / "checkpoint-2").write_text("")
        with open(run.stdout, "a") as handle:
            handle.write("=" * 70000 + "\n" + text)  # more than the read: the header is out of it

    events = (*lineage("stopping"), Event("stopped", OLD, step=2), Event("exit_code", 1))
    status = _status(_cell(tmp_path, monkeypatch, "failed", events, tweak))
    assert "the checkpoint save at the stop failed" in status.message, status.message
    said = f"({named}; train/logs/stdout.log)" if named else "(train/logs/stdout.log says why)"
    assert said in status.message, (row, status.message[-400:])


# A guard stop at step S (its save there holds the failure) after checkpoints at `before` (steps < S): none, one,
# many, steps 9 and 10 (by number, never by name), the latest before S cut short (its digest never written).
GUARD_ROWS = [(before, stop, cut) for before in ((), (1,), (1, 2), (1, 2, 3), (2, 9, 10))
              for stop in sorted({(before[-1] if before else 0) + 1, (before[-1] if before else 0) + 5})
              for cut in ((False, True) if before else (False,))]


@pytest.mark.parametrize(("before", "stop", "cut"), GUARD_ROWS,
                         ids=[f"{'-'.join(map(str, b)) or 'none'}-stop-{s}{'-latest-cut' if c else ''}"
                              for b, s, c in GUARD_ROWS])
def test_a_patched_resume_after_a_guard_stop_starts_from_the_last_whole_checkpoint_before_it(
        tmp_path, monkeypatch, before, stop, cut):
    """resume_training with a patch after the guard stopped at step S: the checkpoint it starts from is the
    latest complete one saved before S, never S's own, an earlier one, or one cut short; with none it refuses
    saying why. What it starts from is read from the refusal of a patch whose max_steps (1) every checkpoint
    reaches (nothing is launched)."""
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    saves = [e for step in before for e in (checkpoint(step)[:-1] if cut and step == before[-1] else checkpoint(step))]
    events = (*lineage("launching"), Event("train_begin", OLD), Event("progress", step=1), *saves,
              Event("stopped", OLD, step=stop), *checkpoint(stop), Event("outcome", (OLD, "stopped")),
              Event("exit_code", 0))
    run_dir = build(tmp_path, make_template(tmp_path), Cell("stopped", events, id="stopped/by-guard"))
    stopped = run_dir / "train" / "logs" / "stopped.json"
    write_signed(stopped, {**json.loads(stopped.read_text()), "by": "guard", "code": "entropy_collapse"})
    whole = [s for s in before if not (cut and s == before[-1])]
    resumed = resume_training(RunRequest(run=str(run_dir), patch={"max_steps": 1}))
    said = " ".join(r.message for r in resumed.refusals)
    assert not resumed.launched and [r.gate for r in resumed.refusals] == ["checkpoint"], resumed.message
    if whole:
        assert said.startswith(f"checkpoint-{whole[-1]} is at step {whole[-1]}, and max_steps is 1"), said
    else:
        assert said.startswith("no checkpoint under") and f"the guard stopped at step {stop}" in said, said


# ---------------------------------------------------------------- a live run (m8): its markers, a stop's wait
@pytest.fixture
def live_run(tmp_path, monkeypatch):
    """A launched run (run.json, the launch header) whose launcher is alive: this test's own process, taken as
    the run's launcher (its command line among processes.LAUNCHERS, its working directory the run's), so the doors
    read a live run with no process started. Never stopped with kill: the launcher's group is pytest's."""
    import psutil

    from mcp_server.training import processes

    run_dir = _cell(tmp_path, monkeypatch, "launching")
    me = psutil.Process()
    record = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**record, "state": "starting", "pid": me.pid, "pgid": None,
                                                  "create_time": me.create_time()}))
    monkeypatch.setattr(processes, "LAUNCHERS", (*processes.LAUNCHERS, me.cmdline()))
    monkeypatch.chdir(run_dir)
    return run_dir


def _marker_forms(run, path: Path) -> dict:
    """Every way a marker file can stand at `path` and what it is: this launch's (signed, its launch id) or not."""
    from mcp_server.evidence import sign_run

    def other_file(p):  # signed as this launch's, but for another file (train/logs/outcome.json), copied here
        p.write_text(json.dumps(sign_run(run, run.outcome, {"time": time.time(), "launch_id": OLD})))

    def linked(p):  # a link to this launch's signed record kept elsewhere
        write_signed(run.logs / "kept.json", {"time": time.time(), "launch_id": OLD})
        p.symlink_to(run.logs / "kept.json")

    return {"absent": (lambda p: None, False),
            "this launch's": (lambda p: write_signed(p, {"time": time.time(), "launch_id": OLD}), True),
            "written by hand": (lambda p: p.write_text(json.dumps({"time": time.time(), "launch_id": OLD})), False),
            "another launch's": (lambda p: write_signed(p, {"time": time.time(), "launch_id": NEW}), False),
            "signed for another file": (other_file, False), "a link": (linked, False)}


MARKER_FORMS = list(_marker_forms(None, Path("/nonexistent")))
LIVE_MARKERS = ("train_begin", "stop_request")  # what process_state reads of a live run


@pytest.mark.parametrize("begin", MARKER_FORMS)
@pytest.mark.parametrize("stop", MARKER_FORMS)
def test_a_live_runs_state_follows_only_its_own_launchs_markers(live_run, begin, stop):
    """A live run is stopping when this launch asked it to stop, running once its trainer began, else starting:
    a marker written by hand, another launch's, signed for another file or reached through a link is none."""
    from mcp_server.runs import Run

    run = Run(live_run)
    forms = _marker_forms(run, run.train_begin)
    for member, form in zip(LIVE_MARKERS, (begin, stop)):
        forms[form][0](getattr(run, member))
    want = "stopping" if forms[stop][1] else "running" if forms[begin][1] else "starting"
    status = _status(live_run)
    assert (status.state, status.alive) == (want, True), (begin, stop, status.message)


class _Waited(Exception):
    """Raised by the report of a stop that says it waits: the row has what it needs, and waits for nothing."""


@pytest.mark.parametrize("timeout_s", [0, 0.0, 0.001, 1, 86400, None])
def test_a_stop_waits_exactly_the_timeout_asked_and_zero_means_not_at_all(live_run, timeout_s):
    """stop_training on a live run: timeout_s 0 asks the run to stop and returns at once (it is left stopping,
    nothing killed); any other timeout is the wait it announces, and none asked is the default wait
    (stopping.STOP_WAIT_S's least, for a run with no step time logged)."""
    from mcp_server.training.models import StopRequest
    from mcp_server.training.status import stop_training
    from mcp_server.training.stopping import STOP_WAIT_S

    said = []

    def report(progress, total, message):
        said.append(message)
        raise _Waited(message)

    start = time.monotonic()
    if timeout_s == 0:
        result = stop_training(StopRequest(run=str(live_run), timeout_s=timeout_s), report)
        assert time.monotonic() - start < 30 and not said, said
        assert (result.state, result.graceful, result.killed) == ("stopping", False, False), result.message
        return
    with pytest.raises(_Waited):
        stop_training(StopRequest(run=str(live_run), timeout_s=timeout_s), report)
    wait = STOP_WAIT_S[0] if timeout_s is None else timeout_s
    how = "an estimate" if timeout_s is None else "as asked"  # walk 13: the default wait is no bound on the step
    assert f"(up to {wait:.0f} s, {how};" in said[0], said


@pytest.mark.parametrize("phase, words", [("succeeded", "succeeded, step 4/"), ("stopped", "was stopped, step 2/")])
def test_status_says_an_ended_state_in_words(tmp_path, monkeypatch, phase, words):
    """Issue 49's sixth walk: training-status said "<run> is succeeded"."""
    run_dir = _cell(tmp_path, monkeypatch, phase)
    status = _status(run_dir)
    assert status.state == phase and f"{run_dir.name} {words}" in status.message, status.message
    assert f"is {phase}" not in status.message, status.message


# ---------------------------------------------------------------- the m9 audit (issue 48): tables of boundaries
LAUNCHED_EXTRA = {"seed": 3, "model_init_kwargs": {"torch_dtype": "float32"}}  # over the template's config
CONFIG_CHANGES = {  # each kind of change to train/config.yaml after the launch
    "edited": lambda c: {**c, "max_steps": 8},
    "added": lambda c: {**c, "temperature": 0.3},
    "removed": lambda c: {k: v for k, v in c.items() if k != "use_cpu"},
    "renamed": lambda c: {("data_seed" if k == "seed" else k): v for k, v in c.items()},
    "nested": lambda c: {**c, "model_init_kwargs": {"torch_dtype": "bfloat16"}},
}


@pytest.mark.parametrize("how", list(CONFIG_CHANGES))
def test_resume_names_every_config_field_changed_since_the_launch(tmp_path, monkeypatch, how):
    """A stopped run whose train/config.yaml changed after the launch, by each kind of change (a field edited,
    added, removed, renamed, a nested value changed): resume_training's config_hash refusal names every field whose
    value differs from run.json's launched_config, with both values, and the values to put back
    (m9-runs-config-refusal-added-field: a field added after the launch was left out)."""
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    seen = {}

    def tweak(run):
        launched = {**yaml.safe_load(run.config.read_text()), **LAUNCHED_EXTRA}
        run.config.write_text(yaml.safe_dump(launched))
        record = json.loads(run.run_json.read_text())
        record.update(launched_config=launched, config_sha256=hashlib.sha256(run.config.read_bytes()).hexdigest())
        run.run_json.write_text(json.dumps(record))
        seen.update(launched=launched, now=CONFIG_CHANGES[how](launched))
        run.config.write_text(yaml.safe_dump(seen["now"]))
    resumed = resume_training(RunRequest(run=str(_cell(tmp_path, monkeypatch, "stopped", tweak=tweak))))
    assert not resumed.launched and [r.gate for r in resumed.refusals] == ["config_hash"], resumed.message
    refusal = resumed.refusals[0]
    launched, now = seen["launched"], seen["now"]
    moved = [k for k in dict.fromkeys([*launched, *now]) if launched.get(k) != now.get(k)]
    assert moved, how
    for k in moved:
        said = f"{k}: {json.dumps(launched.get(k))} at launch, {json.dumps(now.get(k))} now"
        assert said in refusal.message, (how, said, refusal.message)
        assert f"{k}: {json.dumps(launched.get(k))}" in refusal.how_to_clear, (how, k, refusal.how_to_clear)


def _run_forms(run_dir: Path, tmp_path: Path, monkeypatch) -> dict[str, str]:
    """The run folder by each path form a person or a launcher gives it."""
    (tmp_path / "home-link").symlink_to(run_dir.parent, target_is_directory=True)  # a workspace under a linked home
    (tmp_path / "run-link").symlink_to(run_dir, target_is_directory=True)
    (run_dir.parent / "other").mkdir()
    monkeypatch.chdir(run_dir.parent)
    return {"direct": str(run_dir), "through a linked parent folder": str(tmp_path / "home-link" / run_dir.name),
            "through a link to the run": str(tmp_path / "run-link"), "relative": run_dir.name,
            "with ..": str(run_dir.parent / "other" / ".." / run_dir.name)}


SIGNED_READERS = {  # each reader of a run's signed progress lines: the last step it reads
    "training_status": lambda path: _status(Path(path)).step,
    "read_progress": lambda path: _read_progress(path)[0][-1]["step"] if _read_progress(path)[0] else None,
    "last_progress": lambda path: (_last_progress(path) or {}).get("step"),
    "diagnose_run": lambda path: _diagnose(path).last_step,
}


def _read_progress(path):
    from mcp_server.runs import Run
    from mcp_server.training.runstate import read_progress

    return read_progress(Run(Path(path)))


def _last_progress(path):
    from mcp_server.runs import Run
    from mcp_server.training.runstate import last_progress

    return last_progress(Run(Path(path)))


def _diagnose(path):
    from mcp_server.diagnosis.diagnose import diagnose_run
    from mcp_server.diagnosis.models import DiagnoseRequest

    return diagnose_run(DiagnoseRequest(source=path, validate_patches=False))


@pytest.mark.parametrize("reader", list(SIGNED_READERS))
@pytest.mark.parametrize("form", ["direct", "through a linked parent folder", "through a link to the run", "relative",
                                  "with .."])
def test_a_runs_signed_lines_read_the_same_by_every_path_form(tmp_path, monkeypatch, form, reader):
    """A stopped run's signed progress lines, the run given by each path form (direct, through a linked folder,
    relative, with ..) to each reader of them: each reads the run's last step, never 'unsigned or altered'
    (m9-evidence-lines-scope-unresolved: a run reached through a link read every line as unsigned)."""
    run_dir = _cell(tmp_path, monkeypatch, "stopped")
    want = SIGNED_READERS[reader](str(run_dir))
    assert isinstance(want, int), want
    path = _run_forms(run_dir, tmp_path, monkeypatch)[form]
    assert SIGNED_READERS[reader](path) == want, (form, reader)
    if reader == "read_progress":
        assert _read_progress(path)[1] is None, (form, _read_progress(path)[1])


# ---------------------------------------------------------------- the m10 audit (issue 48): generated boundaries
# Rows generated from each contract's own declarations and every boundary of every comparison it makes, so that a
# bug between two rows someone thought of still fails one (m10-runs-*: the stop's window of progress lines, the
# stop's outcome, the ETA, the entropy patch rule). Nothing trains and no process starts.
def _window_rows() -> list[tuple[int, str]]:
    """(lines logged, where the one slow step is): fewer than, exactly and more than the STEP_WINDOW lines a stop
    reads, the slow step first, in the middle, last, just inside and just outside the window."""
    from mcp_server.training.stopping import STEP_WINDOW

    rows = []
    for n in sorted({1, 2, STEP_WINDOW - 1, STEP_WINDOW, STEP_WINDOW + 1, 2 * STEP_WINDOW + 1}):
        for where in ("first", "middle", "last", "window-start", "before-window"):
            at = {"first": 0, "middle": n // 2, "last": n - 1, "window-start": max(n - STEP_WINDOW, 0),
                  "before-window": n - STEP_WINDOW - 1}[where]
            if at >= 0 and (n, at) not in [(m, a) for m, a, _ in rows]:
                rows.append((n, at, where))
    return [(n, at) for n, at, _ in rows]


WINDOW_ROWS = _window_rows()


@pytest.mark.parametrize("count, slow_at", WINDOW_ROWS, ids=[f"{n}-lines-slow-at-{a}" for n, a in WINDOW_ROWS])
def test_a_stop_reads_the_latest_window_of_step_times(tmp_path, monkeypatch, count, slow_at):
    """stop_training's wait and stop_result's step_time_s read the LATEST STEP_WINDOW progress lines (the steps
    as they are now: a run whose steps grew is waited for as long as they take now), the wait counted from the
    last line's time (m10-runs-stop-wait-first-lines: the first 20 lines were read). Each row: `count` lines of
    100 s steps, one of 400 s at `slow_at`, the lines 10 s apart, the last logged 10 s ago."""
    from mcp_server.runs import Run
    from mcp_server.training.derived import DerivedState
    from mcp_server.training.stopping import SAVE_MARGIN_S, STEP_WINDOW, STOP_WAIT_S, stop_result, stop_wait

    run = Run(tmp_path / "run")
    run.logs.mkdir(parents=True)
    now = 1_000_000.0
    rows = [{"step": i + 1, "time": now - 10.0 * (count - i), "step_time": 400.0 if i == slow_at else 100.0}
            for i in range(count)]
    write_signed_lines(run.progress, rows)
    latest = rows[-STEP_WINDOW:]  # the contract: the latest lines, the last one's time
    step = max(r["step_time"] for r in latest)
    wait = min(max(max(latest[-1]["time"] + step - now, 0.0) + 0.5 * step + SAVE_MARGIN_S, STOP_WAIT_S[0]),
               STOP_WAIT_S[1])
    assert stop_wait(run, now=now) == (pytest.approx(wait), step), (count, slow_at)
    config = {"output_dir": "checkpoints"}
    result = stop_result(run, DerivedState(state="running", alive=True), config, graceful=False, killed=False,
                         waited=1.0, timeout_s=1.0, note="")
    assert result.step_time_s == step and f"its steps take up to {step:.0f} s" in result.message, result.message


@pytest.mark.parametrize("planned", [None, 30.0, 300.0, 3000.0], ids=["no plan", "30 s", "300 s", "3000 s"])
@pytest.mark.parametrize("begun_ago", [0.0, 200.0, 5000.0], ids=["just begun", "200 s ago", "5000 s ago"])
def test_a_stop_before_the_first_step_waits_for_the_planned_step(tmp_path, monkeypatch, planned, begun_ago):
    """No step logged yet: the stop waits until the first step's planned end (training's start plus the planner's
    step time, and half another) plus the save, within STOP_WAIT_S; with no plan, the least of STOP_WAIT_S (the
    seventh walk: 120 s while the first step took 4-9 minutes). The measured step time stays None."""
    from mcp_server.memory import estimate
    from mcp_server.runs import Run
    from mcp_server.training.stopping import SAVE_MARGIN_S, STOP_WAIT_S, stop_wait

    run = Run(tmp_path / "run")
    run.logs.mkdir(parents=True)
    now = 1_000_000.0
    run.train_begin.write_text(json.dumps({"time": now - begun_ago}))
    monkeypatch.setattr(estimate, "step_estimate", lambda spec, measure=True, **_: None if planned is None else
                        estimate.StepEstimate(planned, "planned"))
    monkeypatch.setattr("mcp_server.recipe.runspec.RunSpec.of_run", staticmethod(lambda run: None))
    expected = STOP_WAIT_S[0] if planned is None else min(max(
        max(now - begun_ago + planned - now, 0.0) + 0.5 * planned + SAVE_MARGIN_S, STOP_WAIT_S[0]), STOP_WAIT_S[1])
    assert stop_wait(run, now=now) == (pytest.approx(expected), None)


EXIT_CODES = (None, 0, 1, 137)  # none recorded (killed before launch.sh wrote it), clean, an error, SIGKILL
STOP_SAVES = ("complete", "unrecorded", "file-missing", "no-save", "absent", "another-launch")
STOP_OUTCOMES = (None, "stopped", "succeeded")
STOP_MODES = ("graceful", "killed", "waited")  # ended while the stop waited; killed after it; neither


def _stop_events(save: str, outcome: str | None, code: int | None) -> tuple[tuple[Event, ...], str | None]:
    """The writes of a run asked to stop that then ended: its stop's save as `save`, its outcome, its exit code."""
    events = list(lineage("stopping"))
    if save == "complete" or save == "file-missing":
        events += [Event("stopped", OLD, step=2), *checkpoint(2)]
    elif save == "unrecorded":  # every file written, the trainer's record of the save never (the save failed)
        events += [Event("stopped", OLD, step=2), *checkpoint(2)[:-1]]
    elif save == "no-save":  # stopped.json says no checkpoint was saved (rewritten below)
        events += [Event("stopped", OLD, step=2)]
    elif save == "another-launch":  # stopped.json of another launch, its checkpoint saved
        events += [Event("stopped", NEW, step=2), *checkpoint(2)]
    if outcome == "succeeded":  # it reached its end (its final save) while the stop waited
        events += [Event("progress", step=4), Event("final_model", step=4)]
    if outcome:
        events.append(Event("outcome", (OLD, outcome)))
    if code is not None:
        events.append(Event("exit_code", code))
    return tuple(events), ("file-removed" if save == "file-missing" else None)


STOP_CELLS = [(s, o, c) for s in STOP_SAVES for o in STOP_OUTCOMES for c in EXIT_CODES]


@pytest.mark.parametrize("save, outcome, code", STOP_CELLS,
                         ids=[f"{s}-{o or 'no-outcome'}-exit-{c}" for s, o, c in STOP_CELLS])
def test_a_stops_outcome_for_every_save_outcome_and_exit_code(tmp_path, monkeypatch, save, outcome, code):
    """What a stop says after the run ended, for every way its save at the stop went (complete; never recorded;
    a file gone; stopped.json saying none was saved; no stopped.json; another launch's) x the outcome the trainer
    wrote x the launcher's exit code x how the stop ended (the run ended while it waited, killed, neither): graceful
    with 'a checkpoint saved' only when the checkpoint of the step its stopped.json names is complete; otherwise
    an error naming the save and the exit code, whatever that code (m10-runs-stop-failure-exit-only: an exit 0
    after a failed save read 'stopped ... with a checkpoint saved')."""
    from mcp_server.runs import Run
    from mcp_server.training.runstate import derive_state
    from mcp_server.training.stopping import stop_result

    events, variant = _stop_events(save, outcome, code)
    monkeypatch.setenv("LLM_FINETUNING_WORKSPACE", str(tmp_path))
    cell = Cell("stopped", events, variant, id="stop")
    run = Run(build(tmp_path, make_template(tmp_path), cell))
    if save == "no-save":
        write_signed(run.stopped, {**json.loads(run.stopped.read_text()), "checkpoint_saved": False})
    after = derive_state(run)
    state = after.state
    assert not after.alive and after.exit_code == code, (after.state, after.exit_code)
    config = yaml.safe_load(run.config.read_text())
    saved = save == "complete"
    exited = f"exited with code {code}" if code is not None else "no exit code recorded"
    for mode in STOP_MODES:
        result = stop_result(run, after, config, graceful=mode == "graceful", killed=mode == "killed",
                             waited=3.0, timeout_s=3.0, note="")
        said = (save, outcome, code, mode, state, result.message, result.error)
        if mode == "killed":
            assert result.killed and not result.graceful and "killed after 3 s" in (result.error or ""), said
        elif mode == "waited":
            assert not result.graceful and result.error is None and f"ended ({state})" in result.message, said
        elif state == "succeeded":
            assert result.graceful and result.error is None and "ended (succeeded)" in result.message, said
        elif saved:
            assert result.graceful and result.error is None, said
            assert "stopped at step 2 with a checkpoint saved" in result.message, said
        else:
            assert not result.graceful and "with a checkpoint saved" not in result.message, said
            assert exited in (result.error or ""), said
            why = "no checkpoint was saved at the stop" if save in ("absent", "another-launch") else \
                "the checkpoint save at the stop failed: it stopped at step 2"
            assert why in result.error, said


ETA_STEP_S = 600.0  # every logged step's time in the ETA rows
ETA_FRACTIONS = (-0.5, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 10.0)  # time since the last step, in steps: the clock
# behind it, at it, mid-step, at the step's expected end, past it, far past it
ETA_LEFT = (0, 1, 2, 6)  # steps left: none (the floor's - 1 below 0), one, two, several


@pytest.mark.parametrize("left", ETA_LEFT)
@pytest.mark.parametrize("ago", ETA_FRACTIONS)
def test_the_eta_at_every_point_of_a_step(live_run, ago, left):
    """training_status's ETA of a live run: the steps left at the step time, less the time since the last logged
    step (the step under way), never below the steps after the one under way, never below 0; at each point of a
    step (the clock behind the log, the step just logged, a quarter, half, three quarters in, at its expected end,
    overdue) x the steps left (m10-runs-eta-floor-whole: the floor was every step left, so the ETA never fell while
    a step ran). The live launcher is this test's own process (`live_run`)."""
    from mcp_server.runs import Run

    run = Run(live_run)
    max_steps = 10
    step = max_steps - left
    write_signed(run.train_begin, {"max_steps": max_steps, "global_step": 0, "time": time.time() - 10 * ETA_STEP_S,
                                   "launch_id": OLD})
    before = time.time()
    last = before - ago * ETA_STEP_S
    write_signed_lines(run.progress, [{"step": s, "time": last - ETA_STEP_S * (step - s), "step_time": ETA_STEP_S,
                                       "loss": 0.1} for s in range(1, step + 1)])
    status = _status(live_run)
    after = time.time()
    assert (status.state, status.step, status.max_steps) == ("running", step, max_steps), status.message

    if left and ago >= 1.0:  # the step under way is overdue: said so, the ETA of the steps after it (issue 49:
        # "ETA 0.0 min" while the last step still ran)
        assert f"step {step + 1} running for " in status.message, status.message
        assert f"longer than the {ETA_STEP_S:.0f} s steps so far" in status.message, status.message
        assert "ETA 0.0" not in status.message, status.message
        if left == 1:
            assert status.eta_s is None and "ETA" not in status.message, status.message
        else:
            assert status.eta_s == pytest.approx((left - 1) * ETA_STEP_S), status.eta_s
            assert f"ETA {status.eta_s / 60:.1f} min for the steps after it" in status.message, status.message
        return

    def eta(at: float) -> float:  # the contract, at the moment `at` the status was read
        return max(left * ETA_STEP_S - max(at - last, 0.0), max(left - 1, 0) * ETA_STEP_S, 0.0)
    assert eta(after) - 0.05 <= status.eta_s <= eta(before) + 0.05, (ago, left, status.eta_s, eta(before))
    assert f"ETA {status.eta_s / 60:.1f} min" in status.message, status.message


def test_a_live_run_before_its_first_step_has_no_eta(live_run):
    """Before the first logged step: no ETA (nothing measured), whatever the config's max_steps."""
    from mcp_server.runs import Run

    run = Run(live_run)
    write_signed(run.train_begin, {"max_steps": 10, "global_step": 0, "time": time.time(), "launch_id": OLD})
    status = _status(live_run)
    assert status.state == "running" and status.step is None and status.eta_s is None, status.message


def _entropy_rows() -> list[tuple]:
    """(use_adaptive_entropy at launch, in the patch, entropy_coef in the patch): each flag absent (TRL's default),
    false or true, in the config and in the patch; entropy_coef absent, the launched (or default) value, another."""
    flags = ("absent", False, True)
    return [(c, p, e) for c in flags for p in flags for e in ("absent", "same", "changed")]


ENTROPY_ROWS = _entropy_rows()
INVALID = {"learning_rate": -1.0}  # in every patch: one the patch rules accept ends refused by validation, cheaply


def _launched_with(tmp_path, monkeypatch, extra: dict) -> Path:
    """A stopped cell whose launched config (train/config.yaml, run.json's launched_config and hash) holds
    `extra`."""
    def tweak(run):
        launched = {**yaml.safe_load(run.config.read_text()), **extra}
        run.config.write_text(yaml.safe_dump(launched))
        record = json.loads(run.run_json.read_text())
        record.update(launched_config=launched, config_sha256=hashlib.sha256(run.config.read_bytes()).hexdigest())
        run.run_json.write_text(json.dumps(record))
    return _cell(tmp_path, monkeypatch, "stopped", tweak=tweak)


@pytest.mark.parametrize("config_flag, patch_flag, coef", ENTROPY_ROWS,
                         ids=[f"config-{c}-patch-{p}-coef-{e}" for c, p, e in ENTROPY_ROWS])
def test_an_entropy_patch_is_refused_exactly_when_the_controller_replaces_it(tmp_path, monkeypatch, config_flag,
                                                                             patch_flag, coef):
    """resume_training's patch of entropy_coef does not act when use_adaptive_entropy is on for the resume (the
    checkpoint's controller state replaces it): refused naming it exactly then, the flag read from the patch when
    it sets it, else the launched config, else TRL's default; the flag set in the config, in the patch, both,
    neither (m10-runs-patch-entropy-adaptive-default: a flag set only in the config was not read)."""
    from mcp_server.config.grpo_fields import GRPOView
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    launched = {} if config_flag == "absent" else {"use_adaptive_entropy": config_flag}
    run_dir = _launched_with(tmp_path, monkeypatch, launched)
    default = GRPOView.DEFAULTS["entropy_coef"]
    patch = dict(INVALID)
    if patch_flag != "absent":
        patch["use_adaptive_entropy"] = patch_flag
    if coef != "absent":
        patch["entropy_coef"] = default if coef == "same" else default + 0.01
    adaptive = patch.get("use_adaptive_entropy",
                         launched.get("use_adaptive_entropy", GRPOView.DEFAULTS["use_adaptive_entropy"]))
    idle = coef == "changed" and bool(adaptive)
    resumed = resume_training(RunRequest(run=str(run_dir), patch=patch))
    assert not resumed.launched and [r.gate for r in resumed.refusals] == ["config"], resumed.message
    message = resumed.refusals[0].message
    assert ("cannot apply" in message and "entropy_coef" in message) == idle, (patch, launched, message)
    assert ("does not validate" in message) == (not idle), message


def _changed(value):
    """A value other than `value`, of a type the field takes."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return "changed" if value is None or isinstance(value, str) else None


@pytest.mark.parametrize("field", sorted(__import__("mcp_server.training.resume_patch",
                                                     fromlist=["NOT_ACTING"]).NOT_ACTING))
@pytest.mark.parametrize("how", ["launched value", "changed"])
def test_every_field_a_resume_cannot_apply_is_refused_only_when_changed(tmp_path, monkeypatch, field, how):
    """Each field the patch rules declare does not act on a resume (resume_patch.NOT_ACTING): a patch changing it
    from its launched value (TRL's default here) is refused naming it; one giving its launched value is not."""
    from mcp_server.config.grpo_fields import GRPOView
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    run_dir = _launched_with(tmp_path, monkeypatch, {})
    value = GRPOView.DEFAULTS.get(field)
    patch = {**INVALID, field: value if how == "launched value" else _changed(value)}
    resumed = resume_training(RunRequest(run=str(run_dir), patch=patch))
    assert not resumed.launched and [r.gate for r in resumed.refusals] == ["config"], resumed.message
    message = resumed.refusals[0].message
    assert ("cannot apply" in message and f"{field}:" in message) == (how == "changed"), (patch, message)


EDIT_ROWS = [(c, e) for c in ("absent", False, True) for e in ("unchanged", False, True)]


@pytest.mark.parametrize("config_flag, edited_flag", EDIT_ROWS,
                         ids=[f"launched-{c}-edited-{e}" for c, e in EDIT_ROWS])
def test_config_hash_advice_never_proposes_an_entropy_patch_the_controller_replaces(tmp_path, monkeypatch,
                                                                                    config_flag, edited_flag):
    """train/config.yaml edited after the launch to another entropy_coef (and use_adaptive_entropy left, or set
    false or true): resume_training's config_hash refusal proposes resuming with the change as a patch only when
    the controller is off for it (the edit's flag, else the launched one, else TRL's default); otherwise it says a
    resume cannot apply entropy_coef (m10-runs-patch-entropy-adaptive-default)."""
    from mcp_server.config.fields import pinned
    from mcp_server.config.grpo_fields import GRPOView
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    launched = {} if config_flag == "absent" else {"use_adaptive_entropy": config_flag}
    run_dir = _launched_with(tmp_path, monkeypatch, launched)
    config = run_dir / "train" / "config.yaml"
    full = yaml.safe_load(config.read_text())
    edited = {**full, "entropy_coef": GRPOView.DEFAULTS["entropy_coef"] + 0.01}
    if edited_flag != "unchanged":
        edited["use_adaptive_entropy"] = edited_flag
    config.write_text(yaml.safe_dump(edited))
    changed = {k: v for k, v in edited.items() if k != "use_adaptive_entropy" or v != launched.get(k, "absent")}
    adaptive = changed.get("use_adaptive_entropy",
                           launched.get("use_adaptive_entropy", GRPOView.DEFAULTS["use_adaptive_entropy"]))
    resumed = resume_training(RunRequest(run=str(run_dir)))
    assert not resumed.launched and [r.gate for r in resumed.refusals] == ["config_hash"], resumed.message
    way = resumed.refusals[0].how_to_clear
    assert ("a resume cannot apply" in way and "entropy_coef (" in way) == bool(adaptive), (launched, edited, way)
    moved = [k for k in dict.fromkeys([*full, *edited]) if full.get(k) != edited.get(k)]
    proposed = not adaptive and not any(pinned(k) for k in moved)  # a pinned field's change is never a patch
    assert ("resume_training with patch" in way) == proposed, way


@pytest.mark.parametrize("logged", [True, False])
def test_a_stopping_status_says_what_it_waits_for_with_its_figures(live_run, logged):
    """Walk 12: training-status while a stop was in progress said "is stopping, step 2/8" and nothing more. It says
    the step the stop waits for, how long that step has run against what a step takes (the run's logged step times,
    else the planner's figure for a first step), and the stop's deadline: the wait stop_training announced."""
    from mcp_server.runs import Run
    from mcp_server.training.models import StopRequest
    from mcp_server.training.status import stop_training

    run = Run(live_run)
    now = time.time()
    write_signed(run.train_begin, {"time": now - 400.0, "launch_id": OLD})
    if logged:
        _progress(run, [{"step": 1, "time": now - 300.0, "step_time": 100.0},
                        {"step": 2, "time": now - 40.0, "step_time": 260.0}])
    stopped = stop_training(StopRequest(run=str(live_run), timeout_s=0))
    assert stopped.state == "stopping", stopped.message
    message = _status(live_run).message
    assert "is stopping" in message, message
    if logged:
        assert re.search(r"waiting for step 3 to end and its checkpoint to be saved: running for \d+ s of about 260 s "
                         r"\(its steps take up to 260 s\), expected to end with its save within about \d+ s", message)
    else:
        assert re.search(r"waiting for its first step to end and its checkpoint to be saved: running for \d+ s",
                         message), message
    assert re.search(r"the stop was asked \d+ s ago and waits at most 0 s \(its deadline passed", message), message
    assert "after it the run still stops by itself at its step end" in message, message

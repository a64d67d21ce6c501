"""The run-file table (issue 48, fifth round): every file of a run's layout (runs.file_members: each `Run` member
that is no folder) x every way it can be there without being a file (a pipe, a directory, a link to nothing, a
device) x what list_runs and training_status then say. A FIFO at run.json, exit-code, outcome.json or
train-begin.json blocked both doors forever (the MCP ping still answered, the CLI hung); now every reader opens
through userfiles.open_regular, and both doors answer at once, naming the file and what it is.

The rows are generated from runs.py's own declaration, so a new file of the layout gets its rows without a new
test. Each cell is a constructed run (the run-state table's "succeeded" run, nothing trains) with one file
replaced; a door that opens a FIFO to read it is caught there (a writer's probe of the FIFO, not a clock) and fails
the row.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from support import write_signed_lines
from test_run_states import CELLS, build, stand_in_workspace

from mcp_server.reporting import silent
from mcp_server.runs import FOLDERS, Run, file_members

KINDS = {
    "fifo": os.mkfifo,
    "directory": lambda path: path.mkdir(),
    "dangling-link": lambda path: path.symlink_to(path.parent / "nothing-here"),
    "device": lambda path: path.symlink_to("/dev/zero"),
}
SUCCEEDED = next(c for c in reversed(CELLS) if c.phase == "succeeded" and not c.variant)
STOPPED = next(c for c in CELLS if c.phase == "stopped" and not c.variant)
PATIENCE_S = 300  # a door that is only slow (a loaded machine) is waited for this long; pytest's limit is 600 s
ANSWER_MORE_BYTES = 1 << 30


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("run-files-ws")
    with stand_in_workspace(root) as template:
        build(root, template, STOPPED)  # for the resume rows
        yield build(root, template, SUCCEEDED)


class _Blocked(Exception):
    pass


def _address_space() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _reader_of(fifo: Path | None) -> bool:
    """Whether something holds `fifo` open for reading, or waits in its open: a writer's open without blocking
    succeeds only then (else ENXIO). Closing that write end at once gives the reader its end of input."""
    if fifo is None:
        return False
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return True


def _answer(call, fifo: Path | None = None):
    """call()'s answer within ANSWER_MORE_BYTES of address space beyond what the process holds, else MemoryError (a
    reader reading /dev/zero to its end: without the bound, the machine's memory runs out before the row fails).
    Given a `fifo`, called in a thread while this one watches: a door that opens the FIFO to read it (it never opens
    one: userfiles.not_regular looks first) is caught in that open or read and raises _Blocked, whatever the
    machine's load, and set free; one that is only slow is waited for (PATIENCE_S), so load decides no row."""
    import torch  # noqa: F401 - loaded before the bound: a first import under it fails half-way, leaving a
    import transformers  # noqa: F401 - half-made torch to every later test

    done, out = threading.Event(), {}

    def run():
        try:
            out["answer"] = call()
        except BaseException as exc:  # noqa: BLE001 - given back to the test
            out["raised"] = exc
        finally:
            done.set()

    limits = resource.getrlimit(resource.RLIMIT_AS)
    bound = _address_space() + ANSWER_MORE_BYTES
    if limits[1] == resource.RLIM_INFINITY or bound < limits[1]:
        resource.setrlimit(resource.RLIMIT_AS, (bound, limits[1]))
    waited_on, deadline = False, time.monotonic() + PATIENCE_S
    try:
        if fifo is None:
            return call()
        threading.Thread(target=run, daemon=True).start()
        while not done.wait(0.05):
            if _reader_of(fifo):
                waited_on = True
                done.wait(30)  # its end of input given: let the reader finish before the bound is lifted
                break
            if time.monotonic() > deadline:
                raise _Blocked(f"no answer within {PATIENCE_S} s")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)
    if waited_on:
        raise _Blocked(f"the door opened the FIFO {fifo} to read it (it waits there for a writer)")
    if "raised" in out:
        raise out["raised"]
    return out["answer"]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("member", file_members())
def test_a_run_file_that_is_no_file_is_named_and_never_waited_on(member, kind, made):
    from mcp_server.errors import UserInputError
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import list_runs, training_status

    run_dir = made.parent / f"{member}--{kind}"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(made, run_dir, symlinks=True)
    path = getattr(Run(run_dir), member)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    KINDS[kind](path)
    where = str(path.relative_to(run_dir))
    try:
        fifo = path if kind == "fifo" else None
        listed = {Path(r.run_dir).name: r for r in _answer(list_runs, fifo).runs}[run_dir.name]
        assert listed.state == "unreadable" and where in (listed.error or ""), (listed.state, listed.error)
        try:
            said = _answer(lambda: training_status(StatusRequest(run=str(run_dir))), fifo).message
        except UserInputError as exc:  # run.json: no launch record to read, named
            said = str(exc)
        assert where in said and "not a" in said, said
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


# Round 17, b07: one sparse file (no disk used) at run.json, train/request.json or train/config.yaml was read whole:
# list_runs held 4.2 GiB for a 2 GiB hole, and a file of about 6 GiB would take the machine down. Every file of the
# layout x sparse beyond what _answer lets the process take: both doors answer, in bounded memory (a whole read is
# a MemoryError under that bound), and whatever they refuse names the file. A log read in bounded pieces (its
# tail, progress.jsonl past the hole) has nothing to refuse.
@pytest.mark.parametrize("member", file_members())
def test_an_oversized_run_file_is_never_read_whole(member, made):
    from mcp_server.errors import UserInputError
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import list_runs, training_status

    run_dir = made.parent / f"{member}--sparse"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(made, run_dir, symlinks=True)
    path = getattr(Run(run_dir), member)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.write_bytes(b"")
    os.truncate(path, 3 * ANSWER_MORE_BYTES)
    where = str(path.relative_to(run_dir))
    try:
        listed = {Path(r.run_dir).name: r for r in _answer(list_runs).runs}[run_dir.name]
        try:
            said = _answer(lambda: training_status(StatusRequest(run=str(run_dir)))).message
        except UserInputError as exc:
            said = str(exc)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    for answer in (listed.error or "", said):
        if "bytes a file read whole may hold" in answer:
            assert where in answer, answer
    if listed.state == "unreadable":
        assert where in listed.error, listed.error


def test_the_layout_declares_its_folders():
    """Every declared folder is a member of Run, and every member is a folder or a file with rows above."""
    members = {name for name, m in vars(Run).items() if isinstance(m, property)}
    assert FOLDERS <= members, FOLDERS - members
    assert set(file_members()) == members - FOLDERS - {"name"}
    assert {"run_json", "config", "progress", "exit_code", "outcome", "train_begin"} <= set(file_members())


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_an_archive_link_is_refused_before_anything_moves(where, made, tmp_path):
    """Round 7 (D1): archive/ a link (to a folder outside the workspace, or even inside the run) and launch with
    archive_previous moved run.json, the logs and the checkpoints through it. Refused naming archive/, nothing
    moved."""
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    run_dir = made.parent / f"archive-link-{where}"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(made, run_dir, symlinks=True)
    target = tmp_path / "elsewhere" if where == "outside" else run_dir / "train" / "elsewhere"
    target.mkdir()
    (run_dir / "archive").symlink_to(target)
    def files():  # the run lock the launch takes aside
        return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.name != ".launch.lock")

    before = files()
    try:
        result = launch_training(LaunchRequest(run=str(run_dir), archive_previous=True))
        said = " ".join(r.message for r in result.refusals)
        assert not result.launched and "archive" in said and "symbolic link" in said, said
        assert files() == before
        assert not any(target.iterdir())
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def test_a_progress_log_with_a_sparse_hole_is_read_in_bounded_memory(made):
    """Round 7 (M1): `truncate -s +3G progress.jsonl` (a hole: NUL bytes, no disk used) made training_status read
    the whole file into memory (7.1 GB, 74 s). Now the hole is skipped: the last real step is named, the health
    check reads the log, and Python's peak allocation stays small."""
    import json
    import tracemalloc

    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    run_dir = made.parent / "sparse-progress"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(made, run_dir, symlinks=True)
    progress = Run(run_dir).progress
    rows = [{k: v for k, v in json.loads(line).items() if k != "mac"} for line in progress.read_text().splitlines()]
    write_signed_lines(progress, rows)  # a copy's lines are signed for its own folder (issue 48 round 9)
    last_step = rows[-1]["step"]
    os.truncate(progress, progress.stat().st_size + (1 << 30))
    tracemalloc.start()
    try:
        status = _answer(lambda: training_status(StatusRequest(run=str(run_dir))))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    assert peak < 200 << 20, f"peak {peak >> 20} MiB"
    assert status.step == last_step and status.latest["step"] == last_step, status.message
    assert "diagnosis failed" not in status.health_note, status.health_note


# ---------------------------------------------------------------- files the plugin appends to, planted (round 9)
# Issue 48, round 9: O_NOFOLLOW stops a symbolic link only. `ln ~/file train/logs/stdout.log` on a stopped run had
# resume_training append its whole output to the outside file (D3b), and inspection/samples.partial.jsonl swapped
# for a link after sampling's first batch had the rest appended outside the workspace (D1, a plain open("a")).
# Every file a run's writers append to x {a symbolic link, a hard link, a pipe with a reader}: refused, and
# nothing reaches the file (or the pipe's reader) behind it.
def _progress_line(run: Run) -> None:
    from types import SimpleNamespace

    from mcp_server.training.trainer.progress import ProgressCallback

    before = signal.getsignal(signal.SIGUSR1)
    try:
        callback = ProgressCallback(run.dir, guard="off")
        state = SimpleNamespace(is_world_process_zero=True, global_step=1, max_steps=4, epoch=0.0)
        callback.on_log(SimpleNamespace(), state, SimpleNamespace(should_training_stop=False), logs={"loss": 0.1})
    finally:
        signal.signal(signal.SIGUSR1, before)


def _save_line(run: Run) -> None:
    from mcp_server.training.trainer.digest import record_save

    folder = run.dir / "checkpoints" / "checkpoint-1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    record_save(run, folder, 1)


def _stdout_line(run: Run) -> None:
    from mcp_server.training.launch_gates import link_refusals
    from mcp_server.workspace import open_append_nofollow

    PLANTED["gate"] = [r.message for r in link_refusals(run)]  # the launch and resume gate, before anything starts
    with open_append_nofollow(run.stdout) as handle:  # and the launcher's own open, at the point of use
        handle.write(b"==== llm-finetuning resume\n")


def _partial_batch(run: Run) -> None:
    from mcp_server.inspection.sample_files import keeper
    from mcp_server.inspection.sampling_plan import Progress

    plan = {"num_prompts": 2, "generate_calls": 2, "max_new_tokens": 4, "n": 1}
    keep = keeper(run.dir / "inspection" / "samples.partial.jsonl", Progress(silent, plan), [{"prompt": "a"}] * 2,
                  [0, 1], ["a", "b"], "prompt", False)
    keep(0, [[{"text": "first", "ids": [1], "finish_reason": "stop"}]])  # written; swapped after it (the probe)
    _plant(run.dir / "inspection" / "samples.partial.jsonl")
    keep(1, [[{"text": "second", "ids": [2], "finish_reason": "stop"}]])


APPENDED = {"train/logs/stdout.log": _stdout_line, "train/logs/progress.jsonl": _progress_line,
            "train/logs/saves.jsonl": _save_line, "inspection/samples.partial.jsonl": _partial_batch}
PLANTED: dict = {}


def _plant(path: Path) -> None:
    """The planted kind (PLANTED: kind, outside file) at `path`, replacing what is there."""
    kind, outside = PLANTED["kind"], PLANTED["outside"]
    path.unlink(missing_ok=True)
    if kind == "symlink":
        path.symlink_to(outside)
    elif kind == "hardlink":
        os.link(outside, path)
    else:
        os.mkfifo(path)
        PLANTED["reader"] = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a reader: the writer's open would succeed


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
@pytest.mark.parametrize("name", sorted(APPENDED))
def test_a_file_a_run_appends_to_planted_as_a_link_or_pipe_is_refused_never_written_through(name, kind, tmp_path):
    from mcp_server.errors import UserInputError

    run = Run(tmp_path / "runs" / "planted")
    (run.dir / "train" / "logs").mkdir(parents=True)
    (run.dir / "inspection").mkdir()
    outside = tmp_path / "precious.rc"
    outside.write_text("export EDITOR=vim\n")
    PLANTED.clear()
    PLANTED.update(kind=kind, outside=outside)
    if name != "inspection/samples.partial.jsonl":  # planted on a stopped run, before the writer opens it
        _plant(run.dir / name)
    try:
        with pytest.raises((OSError, UserInputError)) as raised:
            _answer(lambda: APPENDED[name](run))
        if "reader" in PLANTED:
            assert os.read(PLANTED["reader"], 1 << 16) == b""  # nothing was written into the pipe
    finally:
        if "reader" in PLANTED:
            os.close(PLANTED["reader"])
    assert outside.read_text() == "export EDITOR=vim\n"
    said = str(raised.value)
    assert name.rsplit("/", 1)[-1] in said, said
    if "gate" in PLANTED:  # the launch gate names it before anything starts
        assert any("stdout.log" in message for message in PLANTED["gate"]), PLANTED["gate"]


# ---------------------------------------------------------------- the run's launch lock, planted (round 17, b02)
# `<run>/.launch.lock` as a link to a file outside the workspace: launch_training and resume_training opened it
# O_RDWR|O_CREAT and truncated it, before any gate (a refused launch too). Every lock a door opens x every form
# of a file that is not the run's own: refused, named, the file behind it untouched (nor made, for a dangling
# link), the door answering at once.
LOCK_FORMS = {
    "symlink": lambda lock, outside: lock.symlink_to(outside),
    "dangling-symlink": lambda lock, outside: (outside.unlink(), lock.symlink_to(outside)),
    "hardlink": lambda lock, outside: os.link(outside, lock),
    "fifo": lambda lock, outside: os.mkfifo(lock),
    "directory": lambda lock, outside: lock.mkdir(),
}


def _lock_door(door: str, run_dir: Path):
    from mcp_server.training.launch import launch_training, resume_training
    from mcp_server.training.models import LaunchRequest, RunRequest, StopRequest
    from mcp_server.training.status import stop_training

    if door == "launch_training":
        return launch_training(LaunchRequest(run=str(run_dir), archive_previous=True))
    if door == "resume_training":
        return resume_training(RunRequest(run=str(run_dir)))
    return stop_training(StopRequest(run=str(run_dir), timeout_s=1))


@pytest.mark.parametrize("door", ["launch_training", "resume_training", "stop_training"])
@pytest.mark.parametrize("form", sorted(LOCK_FORMS))
def test_a_launch_lock_that_is_no_file_of_the_run_is_refused_never_opened_through(form, door, made, tmp_path):
    run_dir = made.parent / f"lock-{form}-{door}"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(made, run_dir, symlinks=True)
    outside = tmp_path / "notes.txt"
    outside.write_text("a file of the person, outside the workspace\n")
    lock = run_dir / ".launch.lock"
    lock.unlink(missing_ok=True)
    LOCK_FORMS[form](lock, outside)
    try:
        result = _answer(lambda: _lock_door(door, run_dir))
        if door != "stop_training":  # the lock is taken first: refused there, naming it
            said = " ".join(r.message for r in result.refusals)
            assert not result.launched and [r.gate for r in result.refusals] == ["lock"], said
            assert ".launch.lock" in said, said
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if form == "dangling-symlink":
        assert not outside.exists()
    else:
        assert outside.read_text() == "a file of the person, outside the workspace\n"


# Round 17, b06: a stopped run, a link planted where the resumed trainer saves its next checkpoint
# (checkpoints/checkpoint-<k+1>/trainer_state.json -> a file outside): resume_training started, and the trainer
# wrote through it. Now the logs gate refuses it, naming it, before anything starts (launch_gates.link_refusals:
# every entry under the output_dir, train/logs/ and cache/; the rows: test_run_tampering's link table).
@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_resume_refuses_a_link_planted_where_the_trainer_saves_next(kind, made, tmp_path):
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    stopped = made.parent / STOPPED.id.replace("/", "--")
    run_dir = made.parent / f"planted-checkpoint-{kind}"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(stopped, run_dir, symlinks=True)
    outside = tmp_path / "victim.json"
    outside.write_text("a file of the person, outside the workspace\n")
    latest = max(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    planted = run_dir / "checkpoints" / f"checkpoint-{latest + 1}" / "trainer_state.json"
    planted.parent.mkdir()
    planted.symlink_to(outside) if kind == "symlink" else os.link(outside, planted)
    try:
        result = _answer(lambda: resume_training(RunRequest(run=str(run_dir))))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    said = " ".join(r.message for r in result.refusals)
    assert not result.launched and [r.gate for r in result.refusals] == ["logs"], said
    assert f"checkpoint-{latest + 1}/trainer_state.json" in said, said
    assert outside.read_text() == "a file of the person, outside the workspace\n"

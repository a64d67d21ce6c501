"""Where a run writes, as one table (round 19, b01/b01b): every folder the run writes into (the launchers, the
trainer, its libraries and trackers, the archive flags) is declared once, in trainer/written.py (WRITTEN), and the
launch and resume gate's link and hard-link checks are generated from it. Rows: one per declared target (a target
without a row fails test_every_write_target_has_a_row) x a link to a folder outside the workspace, a dangling link
(the target itself), and, for a target written in place, an entry of it as a link out, as a dangling link and as a
hard link to a file outside. Each cell is a stopped run (the run-state table's, nothing trains) resumed through
resume_training: refused by the logs gate naming what was planted, and the outside file or folder untouched.

Round 19, b02/b04 and the resume patch's archive/: archive/ is reached through held directory descriptors
(training/run_archive.py): a link planted there after the early check is refused when the move happens, before
anything moves, and nothing leaves the run. The window is forced by code the tool runs at that moment: the
launcher's check (Launcher.check runs right before the gates), and the export's model load."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_run_states import CELLS, build, stand_in_workspace

from mcp_server.training.trainer.written import WRITTEN

STOPPED = next(c for c in CELLS if c.phase == "stopped" and not c.variant)
SUCCEEDED = next(c for c in reversed(CELLS) if c.phase == "succeeded" and not c.variant)

# One row per target of WRITTEN: an entry the run writes there (a target renamed into: its folder alone is refused).
ROWS = {"train": "train/launch.sh", "logs": "train/logs/stdout.log", "cache": "cache/datasets/json/data.arrow",
        "trackers": "trackers/mlflow.db", "output_dir": "checkpoints/checkpoint-9/trainer_state.json",
        "archive": "archive/attempt-1/run.json"}
FOLDER_CASES = ("folder link out", "folder dangling link")
ENTRY_CASES = ("entry link out", "entry dangling link", "entry hard link out")
CELLS_OF_TABLE = [(t.member, case) for t in WRITTEN for case in FOLDER_CASES + (ENTRY_CASES if t.entries else ())]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("write-targets-ws")
    with stand_in_workspace(root) as template:
        yield build(root, template, STOPPED), build(root, template, SUCCEEDED)


def test_every_write_target_has_a_row():
    assert set(ROWS) == {t.member for t in WRITTEN}, "a write target of training/trainer/written.py has no row in ROWS"


def _plant(run_dir: Path, member: str, case: str, outside: Path) -> tuple[str, Path]:
    """What `case` plants for `member` in the run: (its path relative to the run, the outside thing it reaches)."""
    entry = Path(ROWS[member])
    path = run_dir / (entry.parts[0] if member != "logs" else "train/logs") if case in FOLDER_CASES else run_dir / entry
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    reached = outside / "folder" if case == "folder link out" else outside / "file"
    if case == "folder link out":
        reached.mkdir()
    elif case in ("entry link out", "entry hard link out"):
        reached.write_text("a file of the person, outside the workspace\n")
    if case == "entry hard link out":
        os.link(reached, path)
    else:
        path.symlink_to(reached if "dangling" not in case else outside / "nothing-here" / path.name)
    return str(path.relative_to(run_dir)), reached


@pytest.mark.parametrize("member, case", CELLS_OF_TABLE, ids=[f"{m}-{c.replace(' ', '-')}" for m, c in CELLS_OF_TABLE])
def test_a_link_or_second_name_where_the_run_writes_refuses_the_resume(made, tmp_path, member, case):
    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest

    run_dir = made[0].parent / f"planted-{member}-{case.replace(' ', '-')}"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(made[0], run_dir, symlinks=True)
    planted, reached = _plant(run_dir, member, case, tmp_path)
    before = reached.read_bytes() if reached.is_file() else None
    try:
        result = resume_training(RunRequest(run=str(run_dir)))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    said = " ".join(r.message for r in result.refusals)
    assert not result.launched and [r.gate for r in result.refusals] == ["logs"], said
    assert planted in said, said
    if before is not None:
        assert reached.read_bytes() == before
    elif reached.is_dir():
        assert not any(reached.iterdir())


def test_the_trainer_refuses_a_link_in_its_trackers_folder(made, tmp_path, capsys):
    """The trainer's own look at trackers/ (trainer/tracker_dirs.py, from WRITTEN's row), where it is about to
    write: a dangling trackers/mlflow.db (SQLite would create the file it names, outside) is refused, exit 3."""
    from mcp_server.training.trainer.tracker_dirs import make_tracker_dirs

    run_dir = made[0].parent / "trainer-trackers"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(made[0], run_dir, symlinks=True)
    (run_dir / "trackers").mkdir()
    (run_dir / "trackers" / "mlflow.db").symlink_to(tmp_path / "their.db")
    with pytest.raises(SystemExit) as exited:
        make_tracker_dirs(run_dir, ["mlflow"])
    assert exited.value.code == 3 and "trackers/mlflow.db" in capsys.readouterr().err
    assert not (tmp_path / "their.db").exists()
    shutil.rmtree(run_dir)


# Round 19, b04: export_model --archive-previous checked archive/ once, before the load, and renamed export/ into it
# by path after the load, the decode and the save; archive/ planted as a link meanwhile took the earlier export (the
# person's shipped model and card) out of the workspace. The window is forced by the export's own progress line
# ("loading ...", after the check): the move, through held directory descriptors, refuses it; nothing moves.
def test_an_archive_link_planted_during_the_export_moves_nothing_out(workspace, tiny_model, tmp_path):
    from support import emit_run

    from mcp_server.evaluation.export import export_model
    from mcp_server.evaluation.models import ExportRequest
    from mcp_server.errors import UserInputError
    from mcp_server.runs import Run

    run = Run(emit_run("export-archive"))
    shutil.copytree(tiny_model, run.checkpoints)
    export_model.__wrapped__(ExportRequest(run=str(run.dir), allow_unpromoted=True))  # the core, in this process
    first = {p.name: p.read_bytes() for p in run.export.iterdir()}
    outside = tmp_path / "outside"
    outside.mkdir()

    def plant(done, total, line):
        if line.startswith("loading") and not run.archive.is_symlink():
            run.archive.symlink_to(outside)

    with pytest.raises(UserInputError) as refused:
        export_model.__wrapped__(ExportRequest(run=str(run.dir), allow_unpromoted=True, archive_previous=True),
                                 report=plant)
    assert run.archive.is_symlink() and "archive" in str(refused.value), refused.value
    assert not any(outside.iterdir()) and {p.name: p.read_bytes() for p in run.export.iterdir()} == first
    assert not [p for p in run.dir.iterdir() if p.name.startswith(".export-")]  # the new export's staging, gone


@pytest.mark.parametrize("tool", ["export", "promote"])
def test_a_run_outside_the_workspace_is_refused_naming_the_workspace(workspace, tiny_model, tmp_path, tool):
    """Round 19 (noticed): export_model and promote_checkpoint acted on a run given by absolute path outside the
    workspace (export/ written into another workspace's run). Refused, naming the workspace; nothing written."""
    from conftest import cli_here
    from support import emit_run

    run_dir = emit_run(f"elsewhere-{tool}")
    shutil.copytree(tiny_model, run_dir / "checkpoints")
    other = tmp_path / "other-ws" / "runs" / run_dir.name
    other.parent.mkdir(parents=True)
    shutil.move(run_dir, other)
    files = sorted(p for p in other.rglob("*"))
    args = ["export-model", str(other), "--allow-unpromoted"] if tool == "export" else [
        "promote-checkpoint", str(other)]
    proc = cli_here(*args)
    assert proc.returncode == 2 and "outside the workspace" in proc.stderr and str(workspace) in proc.stderr, \
        proc.stderr
    assert sorted(p for p in other.rglob("*")) == files


def test_the_exports_modes_are_set_without_setting_the_process_umask(tmp_path, monkeypatch):
    """Round 19 (noticed): the export read the umask by setting it (os.umask, process-wide) where /proc could not
    tell it, inside the MCP server whose calls run on threads. The modes are set explicitly (0666 and 0777 less the
    umask, as a plain copy's), the umask read without ever being set, even with /proc unreadable."""
    from mcp_server.evaluation.export import modes_as_umask

    status = Path("/proc/self/status").read_text()
    mask = int(next(line for line in status.splitlines() if line.startswith("Umask:")).split()[1], 8)
    folder = tmp_path / "export"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    os.chmod(folder / "model.safetensors", 0o600)
    os.chmod(folder, 0o700)
    read_text = Path.read_text

    def no_proc(self, *args, **kwargs):
        if str(self).startswith("/proc"):
            raise OSError("no /proc here")
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", no_proc)
    monkeypatch.setattr(os, "umask", lambda *_: pytest.fail("os.umask set: process-wide, under the server's threads"))
    modes_as_umask(folder)
    monkeypatch.undo()
    modes = {p.name: p.stat().st_mode & 0o777 for p in [folder, *folder.rglob("*")]}
    assert modes == {"export": 0o777 & ~mask, "sub": 0o777 & ~mask, "model.safetensors": 0o666 & ~mask}, modes

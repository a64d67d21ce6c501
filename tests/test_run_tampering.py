"""Runs tampered with: a patch aiming output_dir at another run, links planted in a stopped run's logs, a
half-written checkpoint, a clock stepped back, a foreign process carrying the run's mark, a run named with a newline,
a link where launch.sh writes its exit code; each door refuses or stays right (issue 33, "Data loss", "Runs,
processes, server" and the run survivors of its mutation audit), replayed through the CLI (in this process where the
process boundary is not what is tested) or the core API.

The runs here are copies of one emitted and inspected run (a copy passes the inspection gate: its pins are
contents) given a launch record by hand: a stopped run with the checkpoints each test needs. Nothing here trains:
each door refuses before a trainer starts, and a test that sees one start (the bug) stops it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from conftest import cli_here, run_cli_json
from support import (append_signed, dead_pid, emit_run, hand_run, module_workspace, pass_inspection, write_exit,
                     write_signed)


# launch_training's launcher, and a person's `bash train/launch.sh`
from mcp_server.training.processes import LAUNCHER, is_launcher  # noqa: E402


@pytest.fixture(scope="module")
def ws(tmp_path_factory, tiny_model):
    with module_workspace(tmp_path_factory, "tampered-runs-ws", CUDA_VISIBLE_DEVICES="") as root:
        template = emit_run("template")
        pass_inspection(template)
        yield root, template


def stopped_run(ws, name: str, steps: tuple[int, ...] = (1,), complete: bool = True) -> Path:
    """A copy of the inspected template, stopped by stop_training after saving checkpoint-<step> for each step."""
    root, template = ws
    run_dir = root / "runs" / name
    shutil.copytree(template, run_dir)
    pid, started = dead_pid()
    config = run_dir / "train" / "config.yaml"
    (run_dir / "run.json").write_text(json.dumps({
        "state": "stopped", "pid": pid, "pgid": pid, "create_time": started, "started_ts": started,
        "cwd": str(run_dir), "launcher": LAUNCHER, "strategy": "single", "num_processes": 1,
        "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest()}))
    (run_dir / "train" / "logs").mkdir(exist_ok=True)
    (run_dir / "train" / "logs" / "stopped.json").write_text(json.dumps({"step": max(steps), "by": "request"}))
    (run_dir / "train" / "logs" / "stdout.log").write_text("==== llm-finetuning launch\n")
    for step in steps:
        save_checkpoint(run_dir / "checkpoints" / f"checkpoint-{step}", complete)
    return run_dir


def save_checkpoint(path: Path, complete: bool = True) -> None:
    """A checkpoint as the Trainer and the run's callback leave it: the weights, trainer_state.json, then the digest
    of what was saved, recorded in the run's train/logs/saves.jsonl; a save cut short has no weights and no
    digest."""
    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import record_save

    path.mkdir(parents=True)
    if complete:
        (path / "model.safetensors").write_bytes(b"weights")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": int(path.name.split("-")[1])}))
    if complete:
        record_save(Run(path.parents[1]), path)  # as the run's callback records the save


def stop_any_trainer(run_dir: Path) -> None:
    """A trainer the bug under test started: its group killed, so nothing outlives the test."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if is_launcher(proc.info["cmdline"]) and Path(proc.cwd()).resolve() == run_dir.resolve():
                os.killpg(proc.pid, signal.SIGKILL)
        except (psutil.Error, OSError):
            continue


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.slow  # it starts a process or trains (the lanes: conftest.py)
def test_a_patch_never_moves_output_dir_into_another_run(ws):
    """resume-training R --patch '{"output_dir": "../OTHER/checkpoints"}' wrote checkpoints into another run and
    overwrote its promoted, exported model: the other-run check ran on the unpatched config."""
    run_dir, other = stopped_run(ws, "patched"), stopped_run(ws, "other")
    (other / "export").mkdir()
    (other / "export" / "model.safetensors").write_bytes(b"the promoted model")
    before, config = tree(other), (run_dir / "train" / "config.yaml").read_bytes()
    try:
        proc, out = run_cli_json("resume-training", str(run_dir), "--patch",
                                 json.dumps({"output_dir": "../other/checkpoints", "learning_rate": 1e-6}), here=True)
    finally:
        stop_any_trainer(run_dir)
    assert proc.returncode == 1 and not out["launched"], out
    refusal = out["refusals"][0]
    assert refusal["gate"] == "config" and "another run directory" in refusal["message"], out["refusals"]
    assert tree(other) == before and (run_dir / "train" / "config.yaml").read_bytes() == config


@pytest.mark.slow  # it starts a process or trains (the lanes: conftest.py)
def test_links_planted_in_the_logs_of_a_stopped_run_are_refused_never_followed(ws, tmp_path):
    """Links in train/logs/ of a stopped run were followed on resume: .exit-code.tmp -> an outside file truncated it
    to "0"; progress.jsonl and stdout.log -> outside files got the training output appended; <run>/cache a link
    had the datasets' cache written outside the workspace."""
    run_dir = stopped_run(ws, "linked-logs")
    outside = {name: tmp_path / f"precious-{name}" for name in (".exit-code.tmp", "progress.jsonl", "stdout.log")}
    logs = run_dir / "train" / "logs"
    (logs / "stdout.log").unlink()
    for name, target in outside.items():
        target.write_text("precious\n")
        (logs / name).symlink_to(target)
    try:
        proc, out = run_cli_json("resume-training", str(run_dir), here=True)
    finally:
        stop_any_trainer(run_dir)
    assert proc.returncode == 1 and [r["gate"] for r in out["refusals"]] == ["logs"], out
    assert "symbolic link" in out["refusals"][0]["message"] and "stdout.log" in out["refusals"][0]["message"]
    assert all(target.read_text() == "precious\n" for target in outside.values())
    # train/logs itself a link to a folder elsewhere: refused the same way
    for name in outside:
        (logs / name).unlink()
    elsewhere = tmp_path / "elsewhere"
    shutil.move(logs, elsewhere)
    logs.symlink_to(elsewhere)
    kept = sorted(p.name for p in elsewhere.iterdir())  # stopped.json and the trainer's saves.jsonl
    proc, out = run_cli_json("resume-training", str(run_dir), here=True)
    stop_any_trainer(run_dir)
    assert proc.returncode == 1 and out["refusals"][0]["gate"] == "logs", out
    assert sorted(p.name for p in elsewhere.iterdir()) == kept  # nothing written there
    # <run>/cache a link: launch.sh points the datasets' arrow copy there, so it would be written outside (issue 48)
    logs.unlink()
    shutil.move(elsewhere, logs)
    (tmp_path / "outside-cache").mkdir()
    (run_dir / "cache").symlink_to(tmp_path / "outside-cache")
    proc, out = run_cli_json("resume-training", str(run_dir), here=True)
    stop_any_trainer(run_dir)
    assert proc.returncode == 1 and [r["gate"] for r in out["refusals"]] == ["logs"], out
    assert "cache ->" in out["refusals"][0]["message"] and not any((tmp_path / "outside-cache").iterdir())


@pytest.mark.slow  # it starts a process or trains (the lanes: conftest.py)
def test_a_half_written_checkpoint_is_never_resumed_and_checkpoints_go_by_step(ws):
    """Resume picked a half-written checkpoint (only trainer_state.json) and failed; checkpoints sorted by name
    put checkpoint-9 after checkpoint-10 (mutation audit)."""
    run_dir = stopped_run(ws, "half-written", steps=(2,), complete=False)
    try:
        proc, out = run_cli_json("resume-training", str(run_dir), here=True)
    finally:
        stop_any_trainer(run_dir)
    assert proc.returncode == 1 and [r["gate"] for r in out["refusals"]] == ["checkpoint"], out
    save_checkpoint(run_dir / "checkpoints" / "checkpoint-1")
    proc, status = run_cli_json("training-status", str(run_dir), here=True)
    assert [Path(p).name for p in status["checkpoints"]] == ["checkpoint-1"], status["checkpoints"]

    run_dir = stopped_run(ws, "nine-and-ten", steps=(9, 10, 11))
    for name in ("model.safetensors",):
        (run_dir / "checkpoints" / "checkpoint-11" / name).unlink()  # the save cut short
    proc, status = run_cli_json("training-status", str(run_dir), here=True)
    assert [Path(p).name for p in status["checkpoints"]] == ["checkpoint-9", "checkpoint-10"], status
    proc, out = run_cli_json("launch-training", str(run_dir), here=True)
    assert proc.returncode == 1 and "(latest checkpoint checkpoint-10)" in out["refusals"][0]["message"], out


@pytest.mark.slow  # it starts a process or trains (the lanes: conftest.py)
def test_a_clock_stepped_back_leaves_a_succeeded_run_succeeded(workspace):
    """A clock step backwards after the launch made a run that succeeded read "failed": its outcome looked older
    than its launch."""
    pid, started = dead_pid()
    run_dir = hand_run(workspace, "clock", state="running", pid=pid, create_time=started, launcher=LAUNCHER,
                       started_ts=time.time() + 3600)  # launched an hour "later" than the clock reads now
    logs = run_dir / "train" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # what the trainer leaves when it succeeds: it began, logged its steps, saved and recorded the final model
    write_signed(logs / "train-begin.json", {"max_steps": 2, "global_step": 0})  # signed, as the trainer does
    for step in (1, 2):
        append_signed(logs / "progress.jsonl", {"step": step})
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    (run_dir / "checkpoints" / "model.safetensors").write_bytes(b"final weights")
    from mcp_server.runs import Run
    from mcp_server.training.trainer.digest import record_save

    record_save(Run(run_dir), run_dir / "checkpoints", 2, final=True)
    write_signed(logs / "outcome.json", {"state": "succeeded"})
    write_exit(run_dir, 0)
    proc, status = run_cli_json("training-status", str(run_dir), here=True,
                                env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert status["state"] == "succeeded", status


def mark_carrier(run_dir: Path, **options) -> subprocess.Popen:
    """A process (its own session) whose environment carries the run mark of `run_dir`."""
    env = {"PATH": os.environ["PATH"], "LLM_FINETUNING_RUN_DIR": str(run_dir.resolve())}
    return subprocess.Popen(["sleep", "300"], env=env, start_new_session=True, **options)


@pytest.mark.slow  # it starts a process or trains (the lanes: conftest.py)
def test_stop_never_signals_a_process_that_only_carries_the_runs_mark(workspace):
    """stop-training killed a foreign process (another uid, its own session) because its environment carried
    LLM_FINETUNING_RUN_DIR; a mark matched by prefix (mutation audit) made stopping `demo` signal `demo-2`."""
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    pid, started = dead_pid()
    demo = hand_run(workspace, "demo", state="running", pid=pid, create_time=started, launcher=LAUNCHER,
                    started_ts=started)
    (demo / "train" / "logs" / "stdout.log").write_text("training\n")
    demo2 = hand_run(workspace, "demo-2")
    carriers = [mark_carrier(demo2, cwd=demo2)]  # the run next door, by prefix
    if os.geteuid() == 0:  # another user's process, in its own session, carrying this run's own mark
        carriers.append(mark_carrier(demo, cwd="/", user=65534, group=65534, extra_groups=[]))
    carriers.append(mark_carrier(demo, cwd="/"))  # this user's shell that exported the mark, elsewhere
    try:
        proc, status = run_cli_json("training-status", "demo", here=True, env=env)
        assert not status["alive"] and status["state"] == "failed", status
        proc, stopped = run_cli_json("stop-training", "demo", "--timeout", "0", here=True, env=env)
        assert proc.returncode == 0 and not stopped["killed"], stopped
        time.sleep(0.3)
        assert [c.poll() for c in carriers] == [None] * len(carriers)
    finally:
        for carrier in carriers:
            carrier.kill()
            carrier.wait()


@pytest.mark.slow  # it starts a process or trains (the lanes: conftest.py)
def test_a_run_named_with_a_newline_is_never_run_or_printed_raw(workspace, tiny_model):
    """A run directory named $'evil\\ntouch PWNED\\n' got its second line executed by train/launch.sh (the name was
    written raw into a comment line); launch and status printed the name raw (a forged line)."""
    from mcp_server.training.launch import build_launch_plan, write_plan_files
    from mcp_server.training.models import LaunchRequest
    from mcp_server.runs import Run

    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    source = emit_run("plain")
    run_dir = source.parent / "evil\ntouch PWNED\n"
    shutil.copytree(source, run_dir)
    run = Run(run_dir)
    written = write_plan_files(run, build_launch_plan(run, LaunchRequest(run=str(run_dir))))
    script = Path(written["script"]).read_text()
    assert [line for line in script.splitlines() if "PWNED" in line] == [
        "# Training launcher for run evil\\ntouch PWNED\\n, written by llm-finetuning launch_training."]
    # bash reads it as one comment: the script, traced without running its commands, has no `touch`
    traced = subprocess.run(["bash", "-n", "-v", written["script"]], capture_output=True, text=True)
    assert traced.returncode == 0 and "\ntouch PWNED" not in traced.stderr
    for door in (("training-status", str(run_dir)), ("launch-training", str(run_dir))):
        out = cli_here(*door, env=env)
        assert "PWNED" in out.stdout and all("touch PWNED" not in line or "\\n" in line
                                             for line in out.stdout.splitlines()), out.stdout


@pytest.mark.slow  # it starts a process or trains (the lanes: conftest.py)
def test_launch_sh_never_writes_the_exit_code_through_a_link(tmp_path):
    """.exit-code.tmp planted as a link to an outside file: train/launch.sh truncated that file to the exit code.
    The script as the launcher renders it, run by bash, with a training command that fails at once."""
    from mcp_server.training.launchers.local.shell import render_launch_sh

    run_dir = tmp_path / "run"
    logs = run_dir / "train" / "logs"
    logs.mkdir(parents=True)
    script = run_dir / "train" / "launch.sh"
    script.write_text(render_launch_sh("run", "/bin/false", ["/bin/false"], cpu=True, server=None))
    outside = tmp_path / "precious"
    outside.write_text("precious\n")
    (logs / ".exit-code.tmp").symlink_to(outside)
    (logs / "exit-code").symlink_to(outside)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert outside.read_text() == "precious\n"
    assert not (logs / "exit-code").is_symlink() and (logs / "exit-code").read_text() == "1\n"


@pytest.mark.slow
def test_a_config_env_block_cannot_switch_the_trainers_checks(workspace, tiny_model, capsys):
    """Issue 48: TRL's TrlParser exports a config's top-level `env:` mapping into os.environ before the trainer's
    point-of-use check runs, and LLM_FINETUNING_SAMPLING=1 is the sampling mode that skips it. Validation refuses
    the block naming the variable, the trainer refuses to build, and a launched trainer never inherits the switch
    from the launching shell (the switch is in-process only)."""
    import os

    import yaml

    from mcp_server.recipe.validate import validate_values
    from support import emit_run, trainer_or_refusal

    run_dir = emit_run("env-switch")
    config = run_dir / "train" / "config.yaml"
    values = yaml.safe_load(config.read_text())
    switched = {**values, "env": {"LLM_FINETUNING_SAMPLING": "1"}}
    found = {f.code: f for f in validate_values(switched, "cpu", 1).findings}
    assert found["env_sets_package_switch"].field == "env.LLM_FINETUNING_SAMPLING", found
    assert "env_sets_package_switch" not in {f.code for f in validate_values({**values, "env": {"X": "1"}}, "cpu",
                                                                            1).findings}
    config.write_text(yaml.safe_dump(switched, sort_keys=False))
    try:
        trainer, refusal = trainer_or_refusal(run_dir, capsys)
    finally:
        os.environ.pop("LLM_FINETUNING_SAMPLING", None)  # TrlParser exported it into this process
    assert trainer is None and "env: block sets LLM_FINETUNING_SAMPLING" in refusal, refusal
    # ... and the switch is no environment variable at all since the fifth round (inspection.trained.sampling,
    # in-process): set in the environment it switches nothing (tests/test_gate_table.py,
    # test_no_environment_variable_switches_the_trainers_checks)
    from mcp_server.inspection.trained import sampling_now

    os.environ["LLM_FINETUNING_SAMPLING"] = "1"
    try:
        assert not sampling_now()
    finally:
        os.environ.pop("LLM_FINETUNING_SAMPLING", None)


# ---------------------------------------------------------------- the launch gate's links, as a table (issue 48, m11)
# m11-runs-cache-link-unrefused: <run>/cache as a link outside the workspace passed the launch gate. Rows: every
# folder the gate refuses as a link (written.WRITTEN, the one list of where the run writes) and every folder of the
# run train/launch.sh writes into (so a folder dropped from the declaration keeps its rows and fails them), every
# entry of the folders written in place (WRITTEN's `entries`: each file Run names under train/logs/, each cache
# launch.sh points into cache/) x where the link leads: inside the workspace, outside it, nowhere (dangling), a
# link to a link outside. Each is refused by the logs gate naming the link, before anything starts (no process: fast).
TARGETS = ("inside-workspace", "outside-workspace", "dangling", "link-to-link")


def _relative(path: Path, run_dir: Path) -> str:
    return path.relative_to(run_dir).as_posix()


def launch_sh_writes() -> tuple[set[str], set[str]]:
    """(the run's folders train/launch.sh writes into, the entries it makes in them), relative to the run: its
    logs folder and the library caches it points into the run, as its header says."""
    import re

    from mcp_server.training.launchers.local.shell import HEADER

    cached = re.findall(r"\$PWD/([\w.-]+)/([\w.-]+)", HEADER)
    return {folder for folder, _ in cached} | set(re.findall(r"\bLOGS=([\w./-]+)", HEADER)), {
        f"{folder}/{entry}" for folder, entry in cached}


def _link_rows() -> list[tuple[str, str]]:
    """(relative path, 'folder' | 'file') of every link the launch gate must refuse."""
    from mcp_server.runs import Run
    from mcp_server.training.trainer.written import written_paths

    run = Run(Path("/r"))
    folders, entries = launch_sh_writes()
    folders |= {_relative(path, run.dir) for _, path in written_paths(run, {})}
    within = {_relative(path, run.dir) for target, path in written_paths(run, {}) if target.entries}
    named = [getattr(run, name) for name, attr in vars(Run).items() if isinstance(attr, property)]
    files = {_relative(path, run.dir) for path in named if isinstance(path, Path) and path.parent != run.dir
             and _relative(path.parent, run.dir) in within}  # the run's files in them (train/logs/progress.jsonl)
    return sorted({(f, "folder") for f in folders} | {(f, "file") for f in files}
                  | {(e, "folder") for e in entries if e.rsplit("/", 1)[0] in within} | set(DEEP_ROWS))


# Round 17, b06: a link planted where the resumed trainer saves its next checkpoint
# (checkpoints/checkpoint-<k+1>/trainer_state.json -> a file outside) was written through. The output_dir and every
# entry at any depth under it, train/logs/ and cache/ (what the trainer, TRL and the libraries write) are rows too.
DEEP_ROWS = [("checkpoints", "folder"), ("checkpoints/checkpoint-4", "folder"),
             ("checkpoints/checkpoint-4/trainer_state.json", "file"), ("checkpoints/model.safetensors", "file"),
             ("checkpoints/runs/events.out", "file"), ("train/logs/attempt/stdout.log", "file"),
             ("cache/datasets/json/data.arrow", "file"), ("trackers/mlflow.db", "file"),
             ("trackers/wandb/run-1/files/output.log", "file")]  # round 19, b01: report_to's trackers/


LINK_ROWS = _link_rows()


def test_every_folder_launch_sh_writes_into_is_refused_as_a_link():
    """The declaration of what the gate refuses holds every folder train/launch.sh writes into."""
    from mcp_server.runs import Run
    from mcp_server.training.trainer.written import written_paths

    run = Run(Path("/r"))
    declared = {_relative(path, run.dir) for _, path in written_paths(run, {})}
    assert launch_sh_writes()[0] <= declared, (launch_sh_writes()[0], declared)
    assert {"cache", "train/logs"} <= {path for path, kind in LINK_ROWS if kind == "folder"}, LINK_ROWS


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("path, kind", LINK_ROWS, ids=[f"{p}" for p, _ in LINK_ROWS])
def test_the_launch_gate_refuses_every_link_where_training_writes(workspace, tmp_path, path, kind, target):
    from mcp_server.runs import Run
    from mcp_server.training.launch_gates import link_refusals

    run_dir = workspace / "runs" / "r"
    for folder in ("train/logs", "cache"):
        (run_dir / folder).mkdir(parents=True)
    assert link_refusals(Run(run_dir)) == []  # the run as launch_training leaves it: nothing to refuse
    name = path.rsplit("/", 1)[-1]
    real = {"inside-workspace": workspace / "runs" / "other" / name, "outside-workspace": tmp_path / "outside" / name,
            "dangling": None, "link-to-link": tmp_path / "outside" / f"real-{name}"}[target]
    if real is not None:
        real.parent.mkdir(parents=True, exist_ok=True)
        real.mkdir() if kind == "folder" else real.write_text("precious\n")
    leads = real or tmp_path / "nothing" / name
    if target == "link-to-link":
        hop = tmp_path / "outside" / f"hop-{name}"
        hop.symlink_to(real)
        leads = hop
    planted = run_dir / path
    if planted.is_dir():
        shutil.rmtree(planted)
    planted.unlink(missing_ok=True)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(leads)
    refusals = link_refusals(Run(run_dir))
    assert [r.gate for r in refusals] == ["logs"], refusals
    assert f"{path} -> {leads}" in refusals[0].message, refusals[0].message


@pytest.mark.parametrize("kind", ["hardlink", "fifo"])
@pytest.mark.parametrize("path", [p for p, kind in DEEP_ROWS if kind == "file"])
def test_the_launch_gate_refuses_a_second_name_or_a_pipe_anywhere_training_writes(workspace, tmp_path, path, kind):
    """The same deep rows as a hard link (a second name of a file outside: O_NOFOLLOW does not stop a write
    through it) or a pipe: refused by the logs gate naming it, before anything starts."""
    from mcp_server.runs import Run
    from mcp_server.training.launch_gates import link_refusals

    run_dir = workspace / "runs" / "r"
    planted = run_dir / path
    planted.parent.mkdir(parents=True)
    outside = tmp_path / "precious.rc"
    outside.write_text("precious\n")
    os.link(outside, planted) if kind == "hardlink" else os.mkfifo(planted)
    refusals = link_refusals(Run(run_dir))
    assert [r.gate for r in refusals] == ["logs"], refusals
    assert path in refusals[0].message, refusals[0].message


# Round 19, b02: launch_training --archive-previous checked archive/ once, before the gates, and moved the earlier
# attempt through it by path after them; archive/ planted as a link to a folder outside meanwhile took run.json, the
# logs and the checkpoints out of the workspace. The window is forced by the launch's own progress line (the
# report the core calls as the config gate starts, after the logs gate looked at archive/): the move, through held
# directory descriptors (training/run_archive.py), refuses the link and nothing moves or starts.
@pytest.mark.slow  # the gates rehearse a training step
def test_an_archive_link_planted_during_the_gates_moves_nothing_out(ws, tmp_path):
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    run_dir = stopped_run(ws, "archive-planted")
    outside = tmp_path / "outside"
    outside.mkdir()

    def plant(done, total, line):
        if line.startswith("config: validating") and not (run_dir / "archive").is_symlink():
            (run_dir / "archive").symlink_to(outside)

    def attempt():  # the earlier attempt's record, logs and checkpoints (the gates write env-report.json)
        return {k: v for k, v in tree(run_dir).items() if k == "run.json" or k.startswith(("train/logs/", "checkp"))}

    before = attempt()
    try:
        result = launch_training(LaunchRequest(run=str(run_dir), archive_previous=True), report=plant)
    finally:
        stop_any_trainer(run_dir)
    assert (run_dir / "archive").is_symlink(), "the planting line was never reported"
    said = " ".join(r.message for r in result.refusals)
    assert not result.launched and "archive" in said and "symbolic link" in said, result.message
    assert not any(outside.iterdir()) and attempt() == before

"""Issue 12, "Nothing is lost or overwritten" and "One run, one trainer; stop touches only our processes",
through the CLI and MCP doors: every observation of the issue, replayed.

The one real launch here trains a run that cannot end on its own during the test (max_steps far away, no
checkpoint before it), so every state it is asked about is known by construction; it is stopped by kill.
"""

from __future__ import annotations

import pytest
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import yaml

from conftest import checkout_env, run_cli, run_cli_json
from support import emit_run, pass_inspection
from mcp_server.runs import Run

# launch_training's launcher, and a person's `bash train/launch.sh`
from mcp_server.training.processes import LAUNCHER, is_launcher  # noqa: E402


def launchers(run_dir: Path) -> list[psutil.Process]:
    """Live launchers (bash on the launch's copy, or `bash train/launch.sh`) working in `run_dir`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if is_launcher(proc.info["cmdline"]) and Path(proc.cwd()).resolve() == run_dir.resolve() \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append((proc, proc.ppid()))
        except psutil.Error:
            continue
    # bash's own subshells (a pipe, a command substitution) carry its command line while they live: one launcher
    pids = {proc.pid for proc, _ in found}
    return [proc for proc, parent in found if parent not in pids]


def test_emission_never_overwrites_keeps_names_readable_and_a_failed_emit_leaves_nothing(workspace, tiny_model):
    """emit-config --run-name X on the same day overwrote X; unicode-only names all became `run`; a failed
    emission (a bad model, a system file as data set) left an empty run directory. The emissions that succeed go
    through the core API (it loads TRL once for the whole suite), the failing ones through the CLI."""
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    today = dt.date.today().isoformat()
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    for args, field in ((["--model", "./no/such/model", "--dataset", "tiny"], "model"),
                        (["--model", "tiny", "--dataset", "/etc/passwd"], "dataset")):
        proc = run_cli("emit-config", *args, "--gpu", "cpu", "--run-name", "x", env=env)
        assert proc.returncode == 2 and f"error: {field}:" in proc.stderr and "Traceback" not in proc.stderr, (
            proc.stderr
        )
    assert not (workspace / "runs").exists()  # nothing left behind, not even an empty runs/

    def emit(name: str):
        return emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name=name))

    first = emit("same")
    config = Path(first.config_path)
    before = config.read_bytes()
    # "ѕаmе" is Cyrillic s, a and e: it made a second run that looked exactly like "same"; it is numbered instead.
    emitted = [first, *(emit(name) for name in ("same", "модель 训练", "🚀", "🚀", "ѕаmе"))]
    names = [Path(r.run_dir).name for r in emitted]
    assert names == [f"{today}-same", f"{today}-same-2", f"{today}-модель-训练", f"{today}-run", f"{today}-run-2",
                     f"{today}-ѕаmе-3"]
    assert config.read_bytes() == before  # the first run's config is untouched by the second emission
    assert sorted(p.name for p in (workspace / "runs").iterdir()) == sorted(names)  # nothing else, nothing hidden

    # Paths inside the run are relative to it: a copy trains on its own data into its own checkpoints.
    values = yaml.safe_load(config.read_text())
    assert values["output_dir"] == "checkpoints"
    assert (
        values["datasets"][0]["data_files"] == "data/train.jsonl" and (config.parents[1] / "data/train.jsonl").is_file()
    )


@pytest.mark.slow
def test_stop_signals_only_a_process_verified_as_the_runs_launcher(workspace, tiny_model):
    """stop-training on a run whose run.json was edited to name another process SIGKILLed that process's group."""
    run_dir = emit_run("edited")
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (run_dir / "run.json").write_text(json.dumps({
            "state": "running", "pid": victim.pid, "pgid": victim.pid, "cwd": str(run_dir), "started_ts": time.time(),
            "create_time": psutil.Process(victim.pid).create_time(), "launcher": LAUNCHER}))
        proc, stopped = run_cli_json("stop-training", str(run_dir), "--timeout", "0", env=env)
        assert proc.returncode == 0, proc.stderr
        assert not stopped["killed"] and "nothing to stop" in stopped["message"]
        time.sleep(0.5)
        assert victim.poll() is None  # untouched
        proc, status = run_cli_json("training-status", str(run_dir), env=env)
        assert not status["alive"] and status["state"] != "running"
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.slow
def test_one_trainer_per_run_stop_survives_a_lost_run_json_and_nothing_is_launched_over(workspace, tiny_model,
                                                                                      monkeypatch):
    """Two launch-training calls at once both started; a deleted or truncated run.json made a live run 'not
    launched' and unstoppable; a copy stuck to the original; launch-training on a launched run trained over it."""
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest
    from mcp_server.training.runlock import run_lock

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a CPU run on any machine
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    run_dir = emit_run("one-trainer", max_steps=100000, save_steps=100000)  # never ends, no checkpoint, in the test
    pass_inspection(run_dir)

    # The lock: while a caller holds it (this test process), a launch is refused at once, naming its pid.
    with run_lock(Run(run_dir), "launch"):
        proc, out = run_cli_json("launch-training", str(run_dir), env=env)
    assert proc.returncode == 1 and not out["launched"] and out["refusals"][0]["gate"] == "lock"
    assert f"pid {os.getpid()}" in out["refusals"][0]["message"] and not (run_dir / "run.json").exists()

    # Two launches at the same moment (the CLI, and the core API in this process): one trainer; the other is
    # refused, by the lock while the first checks its gates (naming that caller) or by the state gate once
    # the first has started (naming its trainer).
    cli = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", "launch-training", str(run_dir), "--json"],
                           env=checkout_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    here = launch_training(LaunchRequest(run=str(run_dir))).model_dump()
    outs = [json.loads(cli.communicate(timeout=300)[0]), here]
    try:
        assert sorted(o["launched"] for o in outs) == [False, True], outs
        winner = next(i for i, o in enumerate(outs) if o["launched"])
        refusal = outs[1 - winner]["refusals"][0]
        pid = outs[winner]["pid"]
        caller = [cli.pid, os.getpid()][winner]
        assert refusal["gate"] in ("lock", "state")
        assert f"pid {caller if refusal['gate'] == 'lock' else pid}" in refusal["message"], refusal
        assert [p.pid for p in launchers(run_dir)] == [pid]

        # run.json truncated mid-run: the live launcher is found by its identity, and run.json restored.
        (run_dir / "run.json").write_text('{"state": "running", "pid": ')
        proc, status = run_cli_json("training-status", str(run_dir), env=env)
        assert status["alive"] and status["pid"] == pid and status["state"] in ("starting", "running"), status
        assert "run.json" in status["note"]
        assert json.loads((run_dir / "run.json").read_text())["pid"] == pid

        # A copy made while it runs is a new run: the original's process is not the copy's to report or stop.
        copy = workspace / "runs" / "copy-of-one-trainer"
        shutil.copytree(run_dir, copy)
        proc, copied = run_cli_json("training-status", str(copy), env=env)
        assert not copied["alive"] and copied["pid"] is None and "copy" in copied["note"]
        proc, stop_copy = run_cli_json("stop-training", str(copy), "--timeout", "0", env=env)
        assert not stop_copy["killed"] and [p.pid for p in launchers(run_dir)] == [pid]

        # run.json deleted mid-run: still stoppable, by the verified launcher alone.
        (run_dir / "run.json").unlink()
        proc, stopped = run_cli_json("stop-training", str(run_dir), "--timeout", "0", "--kill", env=env)
        assert proc.returncode == 1 and stopped["killed"] and stopped["state"] == "stopped", stopped  # a loss
        assert launchers(run_dir) == []
        assert json.loads((run_dir / "run.json").read_text())["state"] == "stopped"
    finally:
        for proc in launchers(run_dir):
            os.killpg(proc.pid, 9)

    # A launched run is never trained over: a fresh launch and an emission into it are refused with the way on.
    config = (run_dir / "train" / "config.yaml").read_bytes()
    proc, again = run_cli_json("launch-training", str(run_dir), env=env)
    assert proc.returncode == 1 and not again["launched"] and again["refusals"][0]["gate"] == "state"
    assert "archive_previous" in again["refusals"][0]["how_to_clear"] and "emit_grpo_config" in again["message"]
    proc = run_cli("emit-config", "--run-dir", str(run_dir), "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu",
                   env=env)
    assert proc.returncode == 2 and "run_dir" in proc.stderr and "resume_training" in proc.stderr, proc.stderr
    assert (run_dir / "train" / "config.yaml").read_bytes() == config

    # The explicit flag archives the earlier attempt first (nothing deleted), then launches afresh.
    fresh = launch_training(LaunchRequest(run=str(run_dir), archive_previous=True))
    try:
        assert fresh.launched, fresh.message
        archived = run_dir / "archive" / "attempt-1"
        assert json.loads((archived / "run.json").read_text())["pid"] == pid
        assert (archived / "train" / "logs" / "stdout.log").is_file()
        trainer = kill_launcher_keeping_trainer(fresh.pid, run_dir)
        # `kill -9` of `bash train/launch.sh` left the trainer running under pid 1: status said failed and a
        # resume started a second trainer. The trainer is the run's process: the run is alive while it lives.
        proc, status = run_cli_json("training-status", str(run_dir), env=env)
        assert status["alive"] and status["state"] in ("starting", "running"), status
        assert str(trainer.pid) in status["note"] and "launcher" in status["note"], status["note"]
        for door in ("resume-training", "launch-training"):
            proc, again = run_cli_json(door, str(run_dir), *(["--archive-previous"] if door[0] == "l" else []),
                                       env=env)
            assert proc.returncode == 1 and again["refusals"][0]["gate"] == "state", again
        assert trainer.is_running() and launchers(run_dir) == []
    finally:
        proc, stopped = run_cli_json("stop-training", str(run_dir), "--timeout", "0", "--kill", env=env)
    assert stopped["killed"] and launchers(run_dir) == [], stopped
    assert not trainer.is_running() or trainer.status() == psutil.STATUS_ZOMBIE
    assert json.loads((run_dir / "run.json").read_text())["state"] == "stopped"


def kill_launcher_keeping_trainer(pid: int, run_dir: Path) -> psutil.Process:
    """SIGKILL the launcher alone once it has started the trainer (its child running train/train.py; the script's
    `$(...)` subshells come and go before it); the trainer lives on, orphaned."""
    launcher = psutil.Process(pid)

    def trainers() -> list[psutil.Process]:
        found = []
        for child in launcher.children():
            try:
                if "train/train.py" in child.cmdline():
                    found.append(child)
            except psutil.Error:
                continue
        return found

    deadline = time.time() + 60
    while not trainers() and time.time() < deadline:
        time.sleep(0.05)
    children = trainers()
    assert len(children) == 1, (launcher.status(), (run_dir / "train" / "logs" / "stdout.log").read_text()[-3000:])
    [trainer] = children
    os.kill(pid, 9)
    os.waitpid(pid, 0)  # this process started it (launch_training in-process): reap it
    return trainer


def test_resume_takes_the_same_lock(workspace):
    """resume_training takes the same lock as launch_training (one trainer however it is started)."""
    from mcp_server.training.runlock import run_lock

    run_dir = workspace / "runs" / "locked"
    (run_dir / "train").mkdir(parents=True)
    with run_lock(Run(run_dir), "launch"):
        proc, out = run_cli_json("resume-training", str(run_dir), env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert proc.returncode == 1 and out["refusals"][0]["gate"] == "lock"
    assert f"pid {os.getpid()}" in out["refusals"][0]["message"]


def test_a_copy_never_trains_into_the_original(workspace, tiny_model):
    """A copied run whose config (as emitted before paths were relative) names the original's output_dir would
    train into the original: refused, naming the fix."""
    original = emit_run("original")
    copy = workspace / "runs" / "copy-of-original"
    shutil.copytree(original, copy)
    config = copy / "train" / "config.yaml"
    values = yaml.safe_load(config.read_text())
    assert values["output_dir"] == "checkpoints"  # as emitted now: the copy trains into its own checkpoints/
    config.write_text(config.read_text().replace("output_dir: checkpoints", f"output_dir: {original / 'checkpoints'}"))
    proc, out = run_cli_json("launch-training", str(copy), env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert proc.returncode == 1 and out["refusals"][0]["gate"] == "config", out
    assert "another run directory" in out["refusals"][0]["message"] and "output_dir: checkpoints" in out["message"]
    assert not (copy / "run.json").exists() and not (original / "checkpoints").exists()


# ---------------------------------------------------------------- round 12, M3: a stop while a launch is under way
# Issue 48, round 12, M3: stop-training sent while launch-training checked its gates answered "is not running (state
# not_launched); nothing to stop", exit 0, and the launch then started and trained. A stop now finds the launch by
# its lock, asks it to start nothing and waits for it.
def _holding_lock(run: Run, held: threading.Event, free: threading.Event) -> None:
    """A launch under way, as the stop finds it: the run's lock held until `free` is set."""
    from mcp_server.training.runlock import run_lock

    with run_lock(run, "launch"):
        held.set()
        free.wait(30)


@pytest.mark.parametrize("launch_ends", [False, True], ids=["still under way", "ends while the stop waits"])
def test_a_stop_during_a_launch_never_says_nothing_to_stop(workspace, launch_ends):
    run_dir = workspace / "runs" / "launching"
    (run_dir / "train").mkdir(parents=True)
    held, free = threading.Event(), threading.Event()
    launch = threading.Thread(target=_holding_lock, args=(Run(run_dir), held, free))
    launch.start()
    held.wait(10)
    if launch_ends:
        threading.Timer(0.5, free.set).start()
    try:
        proc, out = run_cli_json("stop-training", str(run_dir), "--timeout", "3" if launch_ends else "0.3",
                                 here=True, env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    finally:
        free.set()
        launch.join()
    assert proc.returncode == 0 and "nothing to stop" not in out["message"], out
    assert f"pid {os.getpid()}" in out["message"] and "asked to start nothing" in out["message"], out
    said = "ended without starting a trainer" if launch_ends else "had not answered"
    assert said in out["message"] and out["state"] == "not_launched", out
    assert not (run_dir / ".launch.cancel").exists()  # the request lived as long as that launch


@pytest.mark.slow
def test_a_stop_during_a_launchs_gates_cancels_it_before_anything_starts(workspace, tiny_model, monkeypatch):
    """The repro end to end: launch-training (a process) checking its gates, stop-training meanwhile; the launch
    starts nothing (no launch files, no run.json, no trainer), and the stop says so."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    run_dir = emit_run("stop-during-launch", max_steps=100000, save_steps=100000)
    pass_inspection(run_dir)
    launch = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", "launch-training", str(run_dir), "--json"],
                              env=checkout_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock, deadline = run_dir / ".launch.lock", time.time() + 120
        while not (lock.exists() and f'"pid": {launch.pid}' in lock.read_text()) and time.time() < deadline:
            time.sleep(0.05)  # the launch holds its lock: it checks its gates
        proc, stopped = run_cli_json("stop-training", str(run_dir), env=env)
        out, err = launch.communicate(timeout=600)
    finally:
        for proc_ in launchers(run_dir):
            os.killpg(proc_.pid, 9)
        launch.kill()
    result = json.loads(out)
    assert not result["launched"] and result["refusals"][0]["gate"] == "state", result
    assert "stop_training" in result["refusals"][0]["message"], result
    assert proc.returncode == 0 and "ended without starting a trainer" in stopped["message"], stopped
    assert launchers(run_dir) == [] and not (run_dir / "run.json").exists()
    assert not (run_dir / "train" / "launch.sh").exists() and not (run_dir / "train" / "logs").exists()
    assert not (run_dir / ".launch.cancel").exists()

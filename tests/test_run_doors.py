"""Issue 25, "Runs" and "The MCP server" (the CLI's share): a full disk, hostile run names, a symlinked
inspection folder, hidden staging directories, `| head`, and the two halves of a launcher's identity, each
replayed through the CLI (in this process where the process boundary is not what is tested) or the core API; and
a survivor of issue 33's mutation audit: a guard's stop on a lost signal is recorded failed, never stopped.

Every run here is built by hand (a run directory holds nothing more than its files), so no test trains.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from conftest import checkout_env, cli_here, run_cli_json
from support import HOLDING_REWARD, dead_pid, hand_run, write_signed, write_signed_lines

# What a checkpoint save on a full disk leaves in the log (torch.save's writer, then the OSError under it).
FULL_DISK_LOG = """\
{'loss': 0.0, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'epoch': 0.1}
Saving model checkpoint to checkpoints/checkpoint-20
Traceback (most recent call last):
  File "train/train.py", line 80, in <module>
    main()
RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos 4352 vs 4240
OSError: [Errno 28] No space left on device: 'checkpoints/checkpoint-20/optimizer.pt'
"""


@contextlib.contextmanager
def no_room_to_write():
    """Every write that would grow a file fails (EFBIG), as on a full disk; reads still work."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.mark.slow
def test_a_full_disk_is_read_not_crashed_on_and_diagnosed(workspace):
    """On a full disk a checkpoint save crashed the run; training_status failed with OSError (it rewrites
    run.json), list_runs called the run unreadable and diagnose_run said healthy."""
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    pid, started = dead_pid()
    run_dir = hand_run(workspace, "full", state="running", pid=pid, create_time=started, started_ts=started)
    (run_dir / "train" / "logs" / "stdout.log").write_text(FULL_DISK_LOG)
    write_signed_lines(run_dir / "train" / "logs" / "progress.jsonl",
                       [{"step": s, "reward": 0.5, "reward_std": 0.2, "loss": 0.0} for s in (10, 20)])
    record = (run_dir / "run.json").read_bytes()
    with no_room_to_write():
        status = cli_here("training-status", "full", "--json", env=env)
        listed = cli_here("list-runs", "--json", env=env)
        plotted = cli_here("training-status", "full", "--plot", "--json", env=env)
    assert status.returncode == 0, status.stderr
    out = json.loads(status.stdout)
    assert out["state"] == "failed" and "run.json could not be rewritten" in out["note"], out
    assert "No space left on device" in "\n".join(out["log_tail"])
    [row] = json.loads(listed.stdout)["runs"]
    assert row["state"] == "failed" and not row["error"], row
    assert plotted.returncode == 0 and "progress.png could not be written" in json.loads(plotted.stdout)["note"]
    assert (run_dir / "run.json").read_bytes() == record and not (run_dir / "progress.png").exists()

    diagnosis = cli_here("diagnose-run", "full", "--json", env=env)
    codes = [f["code"] for f in json.loads(diagnosis.stdout)["findings"]]
    assert diagnosis.returncode == 1 and codes[0] == "disk_full", (codes, diagnosis.stderr)
    # With room again, the state is recorded.
    assert cli_here("training-status", "full", env=env).returncode == 0
    assert json.loads((run_dir / "run.json").read_text())["state"] == "failed"


@pytest.mark.slow
def test_a_killed_emissions_staging_folder_is_removed_by_the_next_emission(workspace):
    """Round 15: emit-config SIGKILLed left its hidden runs/.emit-* staging folder for good. The next emission
    removes those whose process is gone, and leaves a live process's (an emission under way). Round 16, D2: it
    removed a person's own folder so named too. The killed emission's folder here is a copy of a real one (an
    emission held at its reward module's import, its staging folder copied as it was); a person's folder of the
    same form stays."""
    dead, _ = dead_pid()
    runs = workspace / "runs"
    (workspace / "holder.py").write_text(HOLDING_REWARD)
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    held = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", "emit-config", "--model", "tiny", "--dataset",
                             "tiny", "--gpu", "cpu", "--run-name", "held", "--rewards", '[{"name": "holder.wait"}]'],
                            cwd=workspace, env=checkout_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (workspace / "started").exists():
            assert held.poll() is None and time.monotonic() < deadline, held.communicate()
            time.sleep(0.05)
        [staging] = runs.glob(".emit-*")
        shutil.copytree(staging, runs / f".emit-{dead}-killed", symlinks=True)
    finally:
        (workspace / "go").touch()
        held.communicate(timeout=300)
    assert held.returncode == 0 and not staging.exists()
    (runs / f".emit-{os.getppid()}-live").mkdir()
    (runs / f".emit-{dead}-notes").mkdir()
    (runs / f".emit-{dead}-notes" / "notes.txt").write_text("my notes\n")
    emitted = cli_here("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "next",
                       env=env)
    assert emitted.returncode == 0, emitted.stdout + emitted.stderr
    assert sorted(p.name for p in runs.iterdir() if p.name.startswith(".")) == sorted(
        [f".emit-{os.getppid()}-live", f".emit-{dead}-notes"])
    assert (runs / f".emit-{dead}-notes" / "notes.txt").read_text() == "my notes\n"
    [one, two] = [next(runs.glob(f"*-{name}")) for name in ("held", "next")]
    assert sorted(p.name for p in one.iterdir()) == sorted(p.name for p in two.iterdir()), "the mark left behind"


def test_run_names_never_act_on_the_terminal_and_staging_folders_are_no_runs(workspace):
    """A run named with escape codes and a newline was printed raw by list_runs (one forged a row "succeeded");
    hidden `.emit-*` staging folders were named as known runs."""
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    hand_run(workspace, "\x1b[2K\rplain\n2026-01-01-forged                    succeeded")
    hand_run(workspace, "ordinary")
    (workspace / "runs" / ".emit-abc123").mkdir()
    listed = cli_here("list-runs", env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2 and "\x1b" not in listed.stdout and "\r" not in listed.stdout, lines
    assert any("\\x1b[2K\\rplain\\n2026-01-01-forged" in line for line in lines), lines
    missing = cli_here("training-status", "no-such-run", env=env)
    assert missing.returncode == 2 and "known runs:" in missing.stderr and ".emit-" not in missing.stderr
    assert "ordinary" in missing.stderr


def test_sample_completions_never_writes_through_a_symlinked_inspection_folder(workspace, tmp_path, tiny_model):
    """runs/R/inspection as a symbolic link made sample_completions overwrite files outside the workspace."""
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "samples.jsonl").write_text("precious\n")
    run_dir = hand_run(workspace, "linked")
    (run_dir / "inspection").symlink_to(elsewhere)
    proc = cli_here("sample-completions", "linked", "--model", "tiny", "--dataset", "tiny", "--n", "2",
                    "--num-prompts", "2", "--max-new-tokens", "4", env=env)
    assert proc.returncode == 2 and "error: run:" in proc.stderr and "inspection" in proc.stderr, proc.stderr
    assert "leads outside the run" in proc.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["samples.jsonl"]
    assert (elsewhere / "samples.jsonl").read_text() == "precious\n"


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_the_cli_quietly(workspace):
    """`llm-finetuning ... | head` ended in a BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", "list-rewards", "--json"],
                            env=checkout_env({"LLM_FINETUNING_WORKSPACE": str(workspace)}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err


@pytest.mark.slow
def test_a_process_is_the_runs_launcher_only_by_its_command_line_and_its_start_time(workspace):
    """Dropping either check of a launcher's identity survived the suite. A process working in the run directory
    with the recorded pid and start time, but not `bash train/launch.sh`, is neither reported nor stopped; and a
    real `bash train/launch.sh` whose start time differs from the record is not the recorded process."""
    from mcp_server.runs import Run
    from mcp_server.training.processes import verified_launcher

    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}
    run_dir = hand_run(workspace, "identity")
    (run_dir / "train" / "launch.sh").write_text("sleep 120\n")
    stranger = subprocess.Popen(["sleep", "120"], cwd=run_dir, start_new_session=True)
    launcher = None
    try:
        born = psutil.Process(stranger.pid).create_time()
        (run_dir / "run.json").write_text(json.dumps({
            "state": "running", "pid": stranger.pid, "pgid": stranger.pid, "create_time": born,
            "started_ts": born, "cwd": str(run_dir)}))
        proc, stopped = run_cli_json("stop-training", "identity", "--timeout", "0", here=True, env=env)
        assert proc.returncode == 0 and not stopped["killed"] and stranger.poll() is None, stopped
        proc, status = run_cli_json("training-status", "identity", here=True, env=env)
        assert not status["alive"] and status["state"] == "failed", status
        assert verified_launcher(Run(run_dir), stranger.pid, born) is None  # not our command line

        launcher = subprocess.Popen(["bash", "train/launch.sh"], cwd=run_dir, start_new_session=True)
        deadline = time.time() + 10
        while verified_launcher(Run(run_dir), launcher.pid) is None and time.time() < deadline:
            time.sleep(0.01)
        started = psutil.Process(launcher.pid).create_time()
        assert verified_launcher(Run(run_dir), launcher.pid, started).pid == launcher.pid
        assert verified_launcher(Run(run_dir), launcher.pid, started - 30) is None  # the pid was recycled
    finally:
        for child in (stranger, launcher):
            if child is not None:
                child.kill()
                child.wait()


@pytest.mark.parametrize("stop, state", [({"by": "guard", "code": "signal_lost"}, "failed"),
                                         ({"by": "guard", "code": "entropy_rising"}, "stopped"),
                                         ({"by": "request"}, "stopped")])
def test_a_guard_stop_on_a_lost_signal_is_failed_never_stopped(workspace, stop, state):
    """A guard stop on signal_lost was recorded "stopped" (resumable, as if nothing were wrong) instead of
    "failed": the run learned nothing. The trainer's own door (write_outcome, as the emitted train.py calls it when
    the Trainer returns), then training_status."""
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.trainer.progress import write_outcome
    from mcp_server.training.status import training_status

    run_dir = workspace / "runs" / "guarded"
    logs = run_dir / "train" / "logs"
    logs.mkdir(parents=True)
    write_signed(logs / "stopped.json", {"step": 7, **stop})  # the trainer's own records (evidence.py)
    if stop["by"] == "guard":  # the guard's own record, as guard.py writes it beside stopped.json
        write_signed(logs / "guard.json", {"mode": "stop", "step": 7, "findings": [], "stopped": {
            "code": stop["code"], "step": 7, "save": True}})
    write_outcome(run_dir, "succeeded", global_step=7)
    assert json.loads((logs / "outcome.json").read_text())["state"] == state
    assert training_status(StatusRequest(run=str(run_dir))).state == state

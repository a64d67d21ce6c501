"""The SLURM launcher on a real cluster: slurmctld and two slurmd (n1, n2) on this machine (tests/slurm_cluster.py),
the embedded tiny model's GRPO across both nodes on CPU (torchrun over gloo, one rank per node).

Submit, watch (pending -> running -> completed, progress read while it runs), stop with a checkpoint and
resume, a node killed mid-run, a job cancelled by hand, a run.json edited to name another job, and the
scheduler's refusals as one line before anything is submitted. The cluster starts once for the module; its start
time is printed (pytest -s) and written to <tmp>/cluster-start.txt.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import run_cli, skip_unless_ci
from slurm_cluster import missing_binaries, start_cluster
from support import emit_run, module_workspace, pass_inspection

pytestmark = pytest.mark.slow  # every test here starts a process or trains (the lanes: conftest.py)

HELD = [{"name": "fixture_rewards.held_reward", "params": {}, "weight": 1.0}]
OVERRIDES = {"max_steps": 4, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8,
             "logging_steps": 1, "save_steps": 1, "gradient_accumulation_steps": 1}
# A valid tiny CPU run (support.emit_run) whose reward holds its ranks where a test needs them (HELD).
emit = functools.partial(emit_run, rewards=HELD, base=OVERRIDES)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        skip_unless_ci("the test cluster's slurmd runs as root (it starts job steps as their user)")
    missing = missing_binaries()
    if missing:
        skip_unless_ci(f"no SLURM test cluster: {', '.join(missing)} not installed (make sysdeps installs "
                       "slurm-wlm and munge)")
    root = Path(tempfile_root(tmp_path_factory))
    try:
        cl = start_cluster(root)
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        skip_unless_ci(f"the SLURM daemons did not start: {exc}")
    (root / "cluster-start.txt").write_text(f"{cl.start_s:.2f}\n")
    print(f"\nSLURM test cluster started in {cl.start_s:.2f} s")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(cl.conf))
        yield cl
    cl.stop()


def tempfile_root(factory) -> Path:
    """A short path: munge's socket path must stay under 108 characters."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))


@pytest.fixture(scope="module")
def ws(tmp_path_factory, tiny_model):
    with module_workspace(tmp_path_factory, "slurm-ws", CUDA_VISIBLE_DEVICES="") as root:
        # jobs inherit it (sbatch exports the environment)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LLM_FINETUNING_TEST_HOLD", str(root / "hold"))
            yield root


def inspected(name: str) -> Path:
    run_dir = emit(name)
    pass_inspection(run_dir)
    return run_dir


def status(run_dir: Path):
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    return training_status(StatusRequest(run=str(run_dir)))


def wait_for(run_dir: Path, done, timeout: float = 150, poll: float = 0.5):
    start = time.time()
    deadline = start + timeout
    seen = []
    while time.time() < deadline:
        now = status(run_dir)
        seen.append(now.state)
        if done(now):
            print(f"  [{time.strftime('%H:%M:%S')}] {now.state} step {now.step} after {time.time() - start:.1f} s")
            return now, seen
        if not now.alive and now.state != "pending" and len(seen) > 1:
            raise AssertionError(f"ended as {now.state} before the awaited state: {now.model_dump_json(indent=1)}")
        time.sleep(poll)
    raise AssertionError(f"timed out; states seen {sorted(set(seen))}; last: {now.model_dump_json(indent=1)}")


def launch(run_dir: Path, **options):
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest

    return launch_training(LaunchRequest(run=str(run_dir), num_nodes=2, **options))


@pytest.fixture(scope="module")
def run_dir(ws):
    """One emitted and inspected run; each test launches it afresh (archive_previous), so the inspection is paid
    once."""
    return inspected("two-nodes")


def end_held_ranks(run_dir: Path, timeout: float = 60) -> None:
    """End the ranks a finished job left waiting in the held reward, and the hold: the test cluster tracks
    processes by parentage (proctrack/linuxproc, no cgroups here), so a rank whose torchrun died first outlives its
    step (torchrun gives its workers 30 s after a SIGTERM)."""
    import psutil

    abort = Path(f"{hold()}.abort")
    abort.touch()
    deadline = time.time() + timeout
    while time.time() < deadline:
        left = []
        for proc in psutil.process_iter(["cmdline", "cwd"]):
            if "train/train.py" in (proc.info.get("cmdline") or []) and proc.info.get("cwd") == str(run_dir):
                left.append(proc.pid)
        if not left:
            abort.unlink()
            hold().unlink(missing_ok=True)
            return
        time.sleep(0.3)
    raise AssertionError(f"training processes of {run_dir.name} still alive after {timeout:.0f} s: {left}")


def set_hold(path: Path) -> None:
    """The hold, as a UNIX socket's name: the held reward looks at it from its second training call on, which the
    review never does; the trainer's read check pins no socket (what a file holds is no input there), and a look
    at an absent path passes, so holding and releasing change nothing the verdict reviewed (a regular file there
    was refused as "never read when the rewards were reviewed")."""
    import socket

    path.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))  # the name stays after the socket closes, until unlinked


def hold() -> Path:
    return Path(os.environ["LLM_FINETUNING_TEST_HOLD"])


def wait_running_at_step(run_dir: Path, step: int):
    return wait_for(run_dir, lambda s: s.state == "running" and s.step == step)[0]


def test_bad_cluster_input_is_one_line_before_anything_is_submitted(cluster, ws, tmp_path):
    from mcp_server.errors import UserInputError

    cpu_run = emit("refusals")
    gpu_run = emit("gpu-layout", gpu="H100", num_gpus=6)  # 3 GPUs per node; the nodes have 2 each
    # No scheduler on PATH (through the CLI door): one line, exit 2, before any gate
    proc = run_cli("launch-training", str(cpu_run), "--num-nodes", "2", env={"PATH": str(tmp_path)})
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "launcher: no SLURM scheduler on PATH" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("launch-training", str(cpu_run), "--num-nodes", "2", "--partition", "nope")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: partition: "), proc.stderr
    assert "debug (2 nodes" in proc.stderr and proc.stderr.strip().count("\n") == 0
    with pytest.raises(UserInputError) as too_many:
        launch(gpu_run)
    assert too_many.value.field == "num_gpus / num_nodes" and "debug" in str(too_many.value)
    for run in (cpu_run, gpu_run):  # nothing written, nothing submitted
        assert not (run / "run.json").exists() and not (run / "train" / "launch.slurm").exists()
    assert cluster.run("squeue", "-h", "-o", "%j").stdout.split() == []

    # A layout the partition has (2 GPUs on each of 2 nodes) passes the same check (sbatch --test-only)
    from mcp_server.runs import Run
    from mcp_server.training.launch import build_launch_plan
    from mcp_server.training.models import LaunchRequest
    from mcp_server.training.launchers.slurm.job import preflight

    gpu_fits = emit("gpu-fits", gpu="H100", num_gpus=4)
    plan = build_launch_plan(Run(gpu_fits), LaunchRequest(run="x", num_nodes=2))
    assert plan.launcher == "slurm" and "#SBATCH --gres=gpu:2" in plan.script and "#SBATCH --nodes=2" in plan.script
    preflight(plan.script)  # raises on a refusal
    # ... and the memory plan covers all the job's GPUs: a model that fits none of the layouts is refused by the
    # memory gate before submission, whatever the scheduler would accept
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    big = Path(emit_grpo_config(GRPORecipeRequest(model="Qwen/Qwen3-30B-A3B", dataset="tiny", gpu="H100", num_gpus=4,
                                                  run_name="too-big")).run_dir)
    refused = launch(big)
    assert not refused.launched and "memory" in [r.gate for r in refused.refusals], refused.message
    assert not (big / "run.json").exists() and cluster.run("squeue", "-h", "-o", "%j").stdout.split() == []

    # Submitted, the GPU job records the memory plan per node in run.json and training_status names the nodes it
    # landed on next to it (the job cannot train here: the placeholder GPUs are files; it is cancelled once seen)
    pass_inspection(gpu_fits)
    submitted = launch(gpu_fits)
    assert submitted.launched, submitted.message
    rows = json.loads((gpu_fits / "run.json").read_text())["slurm"]["plan_per_node"]
    assert [r["gpus"] for r in rows] == [2, 2] and all(r["peak_gib_per_gpu"] for r in rows), rows
    seen, _ = wait_for(gpu_fits, lambda s: bool((s.job or {}).get("plan_per_node")), timeout=60)
    cluster.run("scancel", submitted.job_id)
    assert [r["node"] for r in seen.job["plan_per_node"]] == seen.job["nodes"] == ["n1", "n2"], seen.job
    assert "planned per node: n1: train, 2 GPU(s), planned peak" in seen.message, seen.message
    deadline = time.time() + 60
    while cluster.run("squeue", "-h", "-o", "%i").stdout.split() and time.time() < deadline:
        time.sleep(0.5)
    assert cluster.run("squeue", "-h", "-o", "%i").stdout.split() == []


def test_a_two_node_run_pending_then_running_with_progress_requeued_resumes_by_itself_and_completes(cluster, run_dir,
                                                                                                  tmp_path):
    hold = Path(os.environ["LLM_FINETUNING_TEST_HOLD"])
    set_hold(hold)  # the run holds after its first step until the file goes
    blocker = cluster.run("sbatch", "--parsable", "--exclusive", "-N2", "--job-name=blocker", "--output=/dev/null",
                          "--wrap=sleep 600")
    blocker_id = blocker.stdout.strip()

    # Launched as from the CLI, whose private datasets cache (a scratch folder it removes at exit) the job
    # inherited: the job wrote a world-readable copy of the data into the system's temporary folder (issue 33).
    scratch = Path(tempfile.gettempdir()) / f"llm-finetuning-scratch-{uuid.uuid4().hex[:8]}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_FINETUNING_SCRATCH", str(scratch))
        mp.setenv("HF_DATASETS_CACHE", str(scratch / "datasets"))
        result = launch(run_dir, archive_previous=True)
    assert result.launched and result.job_id and result.state == "pending", result.message
    again = launch(run_dir)  # queued already: a second launch is refused, naming the job
    assert not again.launched and again.refusals[0].gate == "state"
    assert f"SLURM job {result.job_id}" in again.refusals[0].message
    record = json.loads((run_dir / "run.json").read_text())
    assert record["backend"] == "slurm" and record["job_id"] == result.job_id
    # the scheduler's commands by absolute path, resolved once for the launch and recorded (issue 48, round 8)
    sbatch, srun = (os.path.abspath(shutil.which(name)) for name in ("sbatch", "srun"))
    assert record["slurm"]["nodes"] == 2 and record["slurm"]["command"][:2] == [sbatch, "--parsable"]
    assert record["slurm"]["commands"]["sbatch"] == sbatch and record["slurm"]["commands"]["srun"] == srun
    script = (run_dir / "train" / "launch.slurm").read_text()
    assert f"{srun} --kill-on-bad-exit=1" in script and "#SBATCH --requeue" in script
    assert "node-$SLURMD_NODENAME.log" in script
    # Each node runs the train.py the verdict pinned through verified_script, with the hashes the local launcher
    # passes (the verdict's bytes, its train.py and reward-code pins), in a Python that inherits no site hook of
    # the submitting shell (issue 48)
    from mcp_server.inspection.trained import REWARD_SHA_ENV, VERDICT_SHA_ENV
    from mcp_server.runs import Run
    from mcp_server.training.trainer.verified_script import SCRIPT_SHA_ENV
    from mcp_server.workspace import sha256_file

    verdict = json.loads((run_dir / "inspection" / "verdict.json").read_text())
    assert "-m mcp_server.training.trainer.verified_script train/train.py --config train/config.yaml" in script
    for name, value in {VERDICT_SHA_ENV: sha256_file(Run(run_dir).verdict), SCRIPT_SHA_ENV: verdict["pins"]["script"],
                        REWARD_SHA_ENV: verdict["pins"]["reward_code"]}.items():
        assert f"export {name}={value}\n" in script, name
    assert 'case "$v" in PYTHON*) unset "$v"' in script and "PYTHONNOUSERSITE=1" in script

    pending, _ = wait_for(run_dir, lambda s: s.state == "pending" and s.job.get("reason") not in (None, "None"))
    assert pending.job["reason"] in ("Resources", "Priority"), pending.job  # the blocker holds both nodes
    assert "pending" in pending.message and pending.job["reason"] in pending.message

    cluster.run("scancel", blocker_id)
    running = wait_running_at_step(run_dir, 1)
    assert sorted(running.job["nodes"]) == ["n1", "n2"] and running.alive
    assert running.latest["step"] == 1 and isinstance(running.latest["reward"], float)
    from mcp_server.training.status import list_runs

    assert {r.run: r.state for r in list_runs().runs}[run_dir.name] == "running"

    # Requeued by the scheduler (as a preemption does): the job starts again and resumes from checkpoint-1 by itself
    cluster.run("scontrol", "requeue", result.job_id)
    requeued, _ = wait_for(run_dir, lambda s: s.state == "pending")
    assert requeued.job["restarts"] == 1, requeued.job
    end_held_ranks(run_dir)  # the first start's ranks (SLURM holds the restart back 2 minutes meanwhile)
    cluster.run("scontrol", "update", f"JobId={result.job_id}", "StartTime=now")  # skip SLURM's requeue delay
    done, _ = wait_for(run_dir, lambda s: not s.alive and s.state != "pending")
    assert done.state == "succeeded" and done.exit_code == 0, done.message + "\n" + "\n".join(done.log_tail)
    assert done.job["scheduler_state"] == "COMPLETED" and done.step == 4 and done.job["restarts"] == 1
    steps = [json.loads(line)["step"] for line in (run_dir / "train" / "logs" / "progress.jsonl").open()]
    assert steps == [1, 2, 3, 4]  # steps 2-4 continue from checkpoint-1
    assert "resuming from checkpoints/checkpoint-1" in (run_dir / "train" / "logs" / "stdout.log").read_text()
    begin = json.loads((run_dir / "train" / "logs" / "train-begin.json").read_text())
    assert begin["world_size"] == 2  # one gloo group over the two nodes
    logs = run_dir / "train" / "logs"
    assert (logs / "node-n1.log").exists() and (logs / "node-n2.log").exists()
    # each node's rank replayed the review in its own environment before its first step (inspection/replay.py)
    replayed = [re.findall(r"replayed the review: .*same scores.*\(rank (\d) of 2\)", (logs / f"node-{n}.log")
                           .read_text()) for n in ("n1", "n2")]
    assert all(replayed) and {r for ranks in replayed for r in ranks} == {"0", "1"}, replayed
    assert {(logs / f"node-{n}.exit").read_text().strip() for n in ("n1", "n2")} == {"0"}
    for node in ("n1", "n2"):  # each node's trainer said what it runs on, from inside the job
        env = json.loads((logs / f"env-{node}.json").read_text())
        assert env["node"] == node and env["job_id"] == result.job_id and env["packages"]["torch"]
    assert sorted(done.job["node_env"]) == [str(logs / "env-n1.json"), str(logs / "env-n2.json")]
    assert (logs / "exit-code").read_text().strip() == "0"
    assert json.loads((run_dir / "run.json").read_text())["state"] == "succeeded"
    # the data's copy was made in the run's own cache/ (a rank killed by the requeue leaves its copy there), never
    # in the server's scratch
    assert not scratch.exists() and (run_dir / "cache").is_dir()
    with pytest.MonkeyPatch.context() as mp:  # where the scheduler cannot be asked, run.json's last view answers
        mp.setenv("PATH", str(tmp_path))
        offline = status(run_dir)
    assert offline.state == "succeeded" and "no SLURM commands on PATH" in offline.note


def test_stop_saves_a_checkpoint_resume_continues_a_killed_node_fails_the_job_and_resume_completes(cluster, run_dir):
    """One run through three jobs: stopped by stop_training at step 2 (checkpoint), resumed, its node n2 killed at
    step 3 (reported failed on n2), resumed again to the end."""
    import threading

    from mcp_server.training.launch import resume_training
    from mcp_server.training.models import RunRequest, StopRequest
    from mcp_server.training.status import stop_training

    set_hold(hold())
    first = launch(run_dir, archive_previous=True, requeue=False)
    assert first.launched and "#SBATCH --no-requeue" in (run_dir / "train" / "launch.slurm").read_text()
    wait_running_at_step(run_dir, 1)  # both ranks now wait in step 2's reward until the hold goes
    stop_file = run_dir / "train" / "logs" / "stop-request.json"

    def release_once_asked():  # the stop is asked while step 2 runs: step 2 ends with a checkpoint
        while not stop_file.exists():
            time.sleep(0.1)
        hold().unlink()

    releaser = threading.Thread(target=release_once_asked, daemon=True)
    releaser.start()
    stopped = stop_training(StopRequest(run=str(run_dir), timeout_s=120))
    releaser.join(5)
    assert stopped.graceful and not stopped.killed and stopped.state == "stopped", stopped.message
    assert Path(stopped.checkpoint).name == "checkpoint-2" and f"job {first.job_id}" in stopped.message
    assert json.loads((run_dir / "train" / "logs" / "stopped.json").read_text())["step"] == 2
    # the job ended by itself after the save; a rank leaving the rendezvous after it may end the job FAILED
    assert status(run_dir).job["scheduler_state"] in ("COMPLETED", "FAILED")

    set_hold(hold())
    second = resume_training(RunRequest(run=str(run_dir)))
    assert second.launched and second.job_id != first.job_id and second.resumed_from == stopped.checkpoint
    wait_running_at_step(run_dir, 3)  # step 3 logged, step 4 held
    # the trainer logs a step before it saves that step's checkpoint: under load the save can still be under way
    wait_for(run_dir, lambda s: (run_dir / "checkpoints" / "checkpoint-3" / "llm-finetuning-digest.json").is_file())
    cluster.kill_node("n2")  # slurmd, its step daemon and its rank: the node is gone
    # n1's rank still waits in the held reward: the job ends by the scheduler's node failure, not by a rank
    wait_for(run_dir, lambda s: not s.alive, timeout=90)
    deadline = time.time() + 60
    while not cluster.node_state("n2").startswith("down") and time.time() < deadline:
        time.sleep(0.5)  # the scheduler holds the node down once it stops answering (SlurmdTimeout)
    failed = status(run_dir)
    end_held_ranks(run_dir)  # n1's rank, still held
    assert failed.state == "failed" and failed.job["failed_nodes"] == ["n2"], failed.message
    assert "node n2" in failed.message and failed.job["scheduler_state"] in ("NODE_FAIL", "FAILED")

    cluster.start_node("n2")
    cluster.wait_idle()
    third = resume_training(RunRequest(run=str(run_dir)))
    assert third.launched and Path(third.resumed_from).name == "checkpoint-3", third.message
    done, _ = wait_for(run_dir, lambda s: not s.alive and s.state != "pending")
    retried = done.state == "failed" and "exit code 143" in done.message
    if retried:
        # Both test nodes are one host: the restarted n2's slurmd can still be ending the dead job's step when the
        # new one starts there, and its SIGTERM reaches the new rank. A second resume from the same checkpoint is
        # what a person would do; the product's part (failed, the node named, resumable) is what is checked.
        end_held_ranks(run_dir)
        cluster.wait_idle()
        third = resume_training(RunRequest(run=str(run_dir)))
        assert third.launched and Path(third.resumed_from).name == "checkpoint-3", third.message
        done, _ = wait_for(run_dir, lambda s: not s.alive and s.state != "pending")
    assert done.state == "succeeded" and done.step == 4, done.message
    steps = [json.loads(line)["step"] for line in (run_dir / "train" / "logs" / "progress.jsonl").open()]
    assert steps == [1, 2, 3, 4] or (retried and sorted(set(steps)) == [1, 2, 3, 4]), steps
    jobs = [(h["job_id"], h["state"]) for h in json.loads((run_dir / "run.json").read_text())["history"]]
    assert jobs[jobs.index((first.job_id, "stopped")) + 1] == (second.job_id, "failed"), jobs


def test_a_job_cancelled_by_hand_reads_as_cancelled_and_a_foreign_job_is_never_touched(cluster, run_dir):
    from mcp_server.training.models import StopRequest
    from mcp_server.training.status import stop_training

    blocker = cluster.run("sbatch", "--parsable", "--exclusive", "-N2", "--job-name=blocker", "--output=/dev/null",
                          "--wrap=sleep 600")
    result = launch(run_dir, archive_previous=True)
    assert result.launched and status(run_dir).state == "pending"
    cluster.run("scancel", result.job_id)  # by hand, not through stop_training
    cancelled, _ = wait_for(run_dir, lambda s: not s.alive)
    assert cancelled.state == "cancelled" and cancelled.job["scheduler_state"] == "CANCELLED", cancelled.message

    # run.json edited to name another job (the blocker): it is neither reported as this run's nor stopped
    foreign = blocker.stdout.strip()
    record_path = run_dir / "run.json"
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "job_id": foreign, "state": "running"}))
    seen = status(run_dir)  # the job the launcher bound to this launch (outside the workspace) is the run's
    assert f"job {foreign}" in seen.note and "not this run's" in seen.note and not seen.alive, seen.note
    assert seen.job["job_id"] == result.job_id and seen.state == "cancelled", seen
    stopped = stop_training(StopRequest(run=str(run_dir), timeout_s=5))
    assert not stopped.killed and "nothing to stop" in stopped.message
    assert cluster.run("squeue", "-h", "-j", foreign, "-o", "%T").stdout.strip() in ("PENDING", "RUNNING")
    cluster.run("scancel", foreign)


def test_a_slurm_launch_is_recorded_outside_the_workspace_and_an_earlier_jobs_records_put_back_are_not_its(
        cluster, run_dir):
    """Issue 48, the seventh round's F1 replay on SLURM: a SLURM launch had no launch id (the launcher's record
    beside the key was written for local launches only), so launch 1's signed records, copied back after launch 2
    and run.json pointed at launch 1's job (its id and ownership token), made launch 2 read succeeded. The launch
    is recorded before sbatch, its id exported to the job (every record it signs carries it) and the job id bound
    into the record: launch 2 reads as its own job ended (cancelled), naming what was not read."""
    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.models import PromoteRequest
    from mcp_server.evaluation.promote import promote_checkpoint
    from mcp_server.evidence import launch_record

    hold().unlink(missing_ok=True)
    first = launch(run_dir, archive_previous=True)
    assert first.launched, first.message
    one = json.loads((run_dir / "run.json").read_text())
    recorded = launch_record(run_dir)
    # `earlier`: the run's earlier launches' records, each checkpoint's provenance (i48)
    assert isinstance(recorded.get("earlier", {}), dict)
    assert {k: v for k, v in recorded.items() if k not in ("trained", "earlier")} == {
        "launch_id": one["launch_id"], "job_id": first.job_id, "job_comment": one["slurm"]["comment"]}
    assert recorded["trained"]["config_sha256"] == one["config_sha256"]  # what trained, signed (the export's card)
    done, _ = wait_for(run_dir, lambda s: not s.alive and s.state != "pending")
    assert done.state == "succeeded", done.message + "\n" + "\n".join(done.log_tail)
    logs = run_dir / "train" / "logs"
    for name in ("outcome.json", "exit.json", "train-begin.json"):  # signed by the job, tagged with its launch
        assert json.loads((logs / name).read_text())["launch_id"] == one["launch_id"], name
    assert {json.loads(line)["launch_id"] for line in (logs / "saves.jsonl").open()} == {one["launch_id"]}

    blocker = cluster.run("sbatch", "--parsable", "--exclusive", "-N2", "--job-name=blocker", "--output=/dev/null",
                          "--wrap=sleep 600").stdout.strip()
    second = launch(run_dir, archive_previous=True)  # held pending by the blocker, then cancelled: it never trains
    assert second.launched and second.job_id != first.job_id, second.message
    assert launch_record(run_dir)["job_id"] == second.job_id
    cluster.run("scancel", second.job_id)
    cluster.run("scancel", blocker)
    assert wait_for(run_dir, lambda s: not s.alive)[0].state == "cancelled"

    archive = max((run_dir / "archive").glob("attempt-*"), key=lambda p: int(p.name.split("-")[1]))
    for name in ("train/logs", "checkpoints"):  # the forger: launch 1's records and models put back, fresh times
        if (run_dir / name).exists():
            shutil.rmtree(run_dir / name)
        shutil.copytree(archive / name, run_dir / name, copy_function=shutil.copy)
    record = json.loads((run_dir / "run.json").read_text())  # pointed at launch 1's job, its token and its id
    (run_dir / "run.json").write_text(json.dumps({**record, "job_id": one["job_id"], "slurm": one["slurm"],
                                                  "launch_id": one["launch_id"], "state": "succeeded"}))
    seen = status(run_dir)
    assert seen.state == "cancelled" and seen.job["job_id"] == second.job_id, seen
    assert "outcome.json is of another launch" in seen.note and f"job {first.job_id}" in seen.note, seen.note
    with pytest.raises(UserInputError) as refused:
        promote_checkpoint(PromoteRequest(run=str(run_dir)))
    assert refused.value.field == "run" and "not succeeded" in str(refused.value), str(refused.value)

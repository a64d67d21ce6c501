"""Every job state SLURM documents, read as the run's state (issue 48, the m13 audit's survivor 15: OUT_OF_MEMORY
was dropped from the failed states and a job the scheduler killed for memory read "unknown"; the cluster in
tests/test_slurm.py reaches only a few states, and no test named OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, TIMEOUT or
PREEMPTED).

The table: every state of squeue(1)'s and sacct(1)'s JOB STATE CODES x the scheduler command that reports it
(`scontrol show job -o`, which knows every state of a job still in the controller's memory; `sacct -P`, which
answers for a job the controller forgot, with the states accounting keeps, CANCELLED as "CANCELLED by <uid>") ->
the state training_status reports, whether it is alive, and for a failed job the node it failed on. The scheduler's
commands are scripts on PATH that print the commands' own text for the run's job (no cluster: a state such as
OUT_OF_MEMORY cannot be made to happen here on demand); the run is a SLURM launch's as the launcher records it
(run.json, the launch record outside the workspace, the trainer's signed train-begin.json). A state the code maps
to nothing ("unknown") fails its row; where the SLURM man pages are installed the table's states are checked
against theirs, so a SLURM that documents a new state gets a failing test, not a silent "unknown"."""

from __future__ import annotations

import gzip
import re
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import skip_unless_ci
from support import hand_run, record_launch, write_signed

from mcp_server.training.launchers.slurm import job as slurm_job
from mcp_server.training.launchers.slurm import scheduler

pytestmark = pytest.mark.slow  # every row runs the scheduler's commands (scripts here) as processes

JOB, NODE, TOKEN, LAUNCH = "4242", "n1", "llm-finetuning:0123456789abcdef", uuid.uuid4().hex
# squeue(1) and sacct(1), "JOB STATE CODES" (slurm-wlm 22.05): scontrol shows a job in any of squeue's states,
# sacct in its own
SQUEUE_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "CONFIGURING", "COMPLETING", "DEADLINE", "FAILED", "NODE_FAIL",
                 "OUT_OF_MEMORY", "PENDING", "PREEMPTED", "RUNNING", "RESV_DEL_HOLD", "REQUEUE_FED", "REQUEUE_HOLD",
                 "REQUEUED", "RESIZING", "REVOKED", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "SUSPENDED",
                 "TIMEOUT")
SACCT_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PENDING",
                "PREEMPTED", "RUNNING", "REQUEUED", "RESIZING", "REVOKED", "SUSPENDED", "TIMEOUT")

# state -> the run's state while the trainer has begun (train-begin.json) and nobody asked it to stop
WAITING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT")  # no allocation yet
HOLDING = ("CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED")
FAILED_ON_A_NODE = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
RUN_STATE = {
    **dict.fromkeys(WAITING, "pending"), **dict.fromkeys(HOLDING, "running"),
    **dict.fromkeys(FAILED_ON_A_NODE, "failed"),
    "COMPLETED": "failed",  # the job script ended, but the trainer signed no outcome: nothing says it succeeded
    "CANCELLED": "cancelled",  # by hand or by the scheduler: stop_training never asked (see the stop row below)
    "TIMEOUT": "timed_out", "PREEMPTED": "preempted",
    "REVOKED": "cancelled",  # a federation's sibling cluster started it: this cluster's copy ended
}
ALIVE = ("pending", "running")
ROWS = ([("scontrol", state) for state in SQUEUE_STATES] + [("sacct", state) for state in SACCT_STATES])


def _documented(page: str) -> tuple[str, ...] | None:
    """The states a man page's JOB STATE CODES section lists, None when the page is not installed."""
    path = Path(f"/usr/share/man/man1/{page}.1.gz")
    if not path.is_file():
        return None
    text = gzip.decompress(path.read_bytes()).decode(errors="replace")
    section = text.split('.SH "JOB STATE CODES"', 1)[1].split("\n.SH ", 1)[0]
    return tuple(sorted(re.findall(r"^\\f[B3][A-Z]+\s+([A-Z_]+)\\f[RP]", section, flags=re.M)))


def test_the_table_holds_every_state_slurm_documents_and_every_state_the_code_names():
    assert set(RUN_STATE) == set(SQUEUE_STATES) >= set(SACCT_STATES)
    named = {*scheduler.ACTIVE, *slurm_job.PENDING, *slurm_job.FAILED, *slurm_job.STATE_OF, "COMPLETED", "CANCELLED"}
    assert named <= set(SQUEUE_STATES), f"states the code names that SLURM does not: {sorted(named - set(RUN_STATE))}"
    pages = {page: _documented(page) for page in ("squeue", "sacct")}
    if None in pages.values():
        skip_unless_ci("the SLURM man pages (squeue.1, sacct.1) are not installed: the table is not checked "
                       "against them")
    assert pages == {"squeue": tuple(sorted(SQUEUE_STATES)), "sacct": tuple(sorted(SACCT_STATES))}


def _scontrol_line(run_dir: Path, state: str) -> str:
    """`scontrol show job -o <id>` as slurmctld 22.05 prints it (one line; a pending job has no nodes yet)."""
    nodes = "(null)" if state in WAITING else NODE
    reason = {"PENDING": "Priority", "OUT_OF_MEMORY": "OutOfMemory", "NODE_FAIL": "NodeDown"}.get(state, "None")
    return (f"JobId={JOB} JobName={run_dir.name} UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 "
            f"Nice=0 Account=(null) QOS=(null) JobState={state} Reason={reason} Dependency=(null) Requeue=1 "
            "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:01:05 TimeLimit=UNLIMITED TimeMin=N/A "
            "SubmitTime=2026-01-01T10:00:00 EligibleTime=2026-01-01T10:00:00 AccrueTime=2026-01-01T10:00:00 "
            "StartTime=2026-01-01T10:00:01 EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
            "LastSchedEval=2026-01-01T10:00:01 Scheduler=Main Partition=debug AllocNode:Sid=login:4242 "
            f"ReqNodeList=(null) ExcNodeList=(null) NodeList={nodes} BatchHost={NODE} NumNodes=1 NumCPUs=2 "
            "NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,node=1,billing=2 Socks/Node=* "
            "NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) "
            "DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) "
            f"WorkDir={run_dir} Comment={TOKEN} StdErr={run_dir}/train/logs/stdout.log StdIn=/dev/null "
            f"StdOut={run_dir}/train/logs/stdout.log Power=\n")


def _sacct_line(run_dir: Path, state: str) -> str:
    """`sacct -j <id> -X -n -P -o JobID,JobName,State,ExitCode,NodeList,Reason,WorkDir,Comment,Partition`."""
    shown = "CANCELLED by 0" if state == "CANCELLED" else state  # sacct names who cancelled it
    nodes = "None assigned" if state in WAITING else NODE
    return f"{JOB}|{run_dir.name}|{shown}|0:0|{nodes}|None|{run_dir}|{TOKEN}|debug\n"


SCRIPT = """#!/bin/sh
here=$(dirname "$0")
case "$(basename "$0") $1 $2" in
  "scontrol show job") [ -s "$here/scontrol.out" ] && exec cat "$here/scontrol.out"
    echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1;;
  "scontrol show hostnames") echo "$3";;
  "scontrol show node") echo "NodeName=$4 Arch=x86_64 CPUAlloc=0 CPUTot=2 State=IDLE Partitions=debug";;
  sacct*) cat "$here/sacct.out" 2>/dev/null;;
  squeue*) ;;
  *) echo "$(basename "$0"): not part of this test" >&2; exit 2;;
esac
"""


@pytest.fixture()
def scheduler_bin(tmp_path, monkeypatch) -> Path:
    """scontrol, sacct and squeue: scripts that print the text in scontrol.out / sacct.out beside them."""
    folder = tmp_path / "slurm-bin"
    folder.mkdir()
    for name in ("scontrol", "sacct", "squeue"):
        path = folder / name
        path.write_text(SCRIPT)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    return folder


def slurm_run(workspace: Path, name: str = "r") -> Path:
    """A run as a SLURM launch leaves it once its trainer began: run.json (the job, its token), the launch record
    with the job bound, and train-begin.json signed for the launch."""
    started = time.time() - 60
    run_dir = hand_run(workspace, name, backend="slurm", job_id=JOB, state="pending", started_ts=started,
                       launch_id=LAUNCH, slurm={"job_id": JOB, "comment": TOKEN, "job_name": name, "nodes": 1,
                                                "partition": "debug", "gpus_per_node": None})
    record_launch(run_dir, LAUNCH, job_id=JOB)
    write_signed(run_dir / "train" / "logs" / "train-begin.json", {"launch_id": LAUNCH, "global_step": 0,
                                                                    "max_steps": 4, "time": started + 5})
    return run_dir


def status(run_dir: Path):
    from mcp_server.training.models import StatusRequest
    from mcp_server.training.status import training_status

    return training_status(StatusRequest(run=str(run_dir)))


@pytest.mark.parametrize(("command", "state"), ROWS, ids=[f"{c}-{s}" for c, s in ROWS])
def test_every_job_state_reads_as_the_runs_state(command, state, workspace, scheduler_bin):
    run_dir = slurm_run(workspace)
    if command == "scontrol":
        (scheduler_bin / "scontrol.out").write_text(_scontrol_line(run_dir, state))
    else:  # the controller forgot the job: accounting answers
        (scheduler_bin / "sacct.out").write_text(_sacct_line(run_dir, state))
    seen = status(run_dir)
    assert (seen.state, seen.alive) == (RUN_STATE[state], RUN_STATE[state] in ALIVE), (seen.state, seen.message)
    assert seen.job["job_id"] == JOB and seen.job["scheduler_state"] == state and seen.job["source"] == command
    if state in FAILED_ON_A_NODE:  # where it failed, for the person to read its node's log
        assert seen.job["failed_nodes"] == [NODE] and f"job {JOB} {state} on node {NODE}" in seen.message, seen
    if RUN_STATE[state] in ("cancelled", "timed_out", "preempted"):
        assert f"job {JOB} {state} by the scheduler or by hand, not by stop_training" in seen.message, seen.message


@pytest.mark.parametrize("command", ["scontrol", "sacct"])
def test_a_job_cancelled_after_stop_training_asked_reads_stopped(command, workspace, scheduler_bin):
    run_dir = slurm_run(workspace)
    write_signed(run_dir / "train" / "logs" / "stop-request.json", {"launch_id": LAUNCH, "job_id": JOB,
                                                                     "time": time.time()})
    line = _scontrol_line(run_dir, "CANCELLED") if command == "scontrol" else _sacct_line(run_dir, "CANCELLED")
    (scheduler_bin / f"{command}.out").write_text(line)
    seen = status(run_dir)
    assert (seen.state, seen.alive) == ("stopped", False), (seen.state, seen.message)


def test_a_state_no_slurm_documents_is_named_not_guessed(workspace, scheduler_bin):
    run_dir = slurm_run(workspace)
    (scheduler_bin / "scontrol.out").write_text(_scontrol_line(run_dir, "LAUNCH_FAILED"))
    seen = status(run_dir)
    assert seen.state == "unknown" and not seen.alive
    assert f"reports job {JOB} as LAUNCH_FAILED" in seen.note, seen.note


def test_the_scripts_answer_as_the_commands_do(tmp_path, scheduler_bin):
    """The fixture's own check: no output for a job it holds none of, as scontrol and sacct answer then."""
    missing = subprocess.run(["scontrol", "show", "job", "-o", JOB], capture_output=True, text=True)
    assert missing.returncode == 1 and "Invalid job id" in missing.stderr
    assert scheduler.job(JOB) is None

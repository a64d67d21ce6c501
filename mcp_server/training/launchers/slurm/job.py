"""The SLURM backend's job: a run's plan turned into a job (submit), the job read back as the run's state (status),
and the job ended (stop). launcher.py puts them on the launcher seam; the local backend's counterparts live in
launchers/local/ (launcher.py, process_state.py).

run.json of a SLURM run holds `"backend": "slurm"`, the job id and the submission (partition, nodes, the
sbatch command, the ownership token written as the job's --comment). A job is this run's only when the
scheduler says its name is the run's name, its working directory is the run directory and its comment is the
recorded token: a run.json edited to name another job id is caught, that job is neither reported nor touched,
and the run's own job is looked up by name among the queued ones.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time
import uuid
from pathlib import Path

from mcp_server.config.target import Target
from mcp_server.errors import UserInputError
from mcp_server.evidence import launch_record, record_launch, sign_run
from mcp_server.recipe.recorded import RecordedRequest
from mcp_server.runs import LAUNCH_ID_ENV, Run
from mcp_server.training.launchers.slurm import scheduler
from mcp_server.training.derived import DerivedState
from mcp_server.training.launchers.slurm.node_plan import beside_scheduler
from mcp_server.training.launchers.slurm.script import SlurmLayout
from mcp_server.workspace import atomic_write_json
from mcp_server.training.runrecord import (end_notes, launch_of, read_exit_code, signed_record, stop_failure,
                                           success_problems)

# Every job state SLURM documents (squeue(1), sacct(1): tests/test_slurm_states.py holds the table) maps to a run
# state: these, COMPLETED and CANCELLED below, and the active ones (scheduler.ACTIVE: starting, running, stopping).
PENDING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT")
FAILED = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
# REVOKED: a federation's sibling cluster started the job, so this cluster's copy ended, not by stop_training
STATE_OF = {"TIMEOUT": "timed_out", "PREEMPTED": "preempted", "REVOKED": "cancelled"}
STOP_GRACE_S = 30  # after scancel: how long the scheduler gets to end the job


def layout_for(run: Run, run_request: RecordedRequest, config: dict, *, target: Target, processes: int | None,
               strategy: str, server_mode: bool, python: str, pythonpath: str | None, partition: str | None,
               account: str | None, time_limit: str | None, resume_from: str | None,
               requeue: bool = True) -> SlurmLayout:
    """The typed layout of a SLURM job for this run (keyword arguments only: each names what it is). The world is
    `target`'s (config.target.Target: nodes, GPUs per node, training nodes, the server's node), not decided here."""
    if any(ch.isspace() for ch in str(run.dir)):
        raise UserInputError("run", f"{run.dir} holds whitespace, which #SBATCH lines cannot carry: move the "
                             "workspace (LLM_FINETUNING_WORKSPACE) to a path without spaces for SLURM runs")
    if target.training_nodes(server_mode) < 1 or (server_mode and target.nodes < 2):  # a node serves, one trains
        raise UserInputError("num_nodes", "vLLM server mode over several nodes needs at least 2 nodes (one serves)")
    if strategy in ("auto", "single"):
        strategy = "ddp" if target.cpu or run_request.finetune in ("lora", "qlora") else "zero3"
    return SlurmLayout(
        run_dir=str(run.dir), job_name=run.name, comment=f"llm-finetuning:{uuid.uuid4().hex[:16]}",
        python=python, nodes=target.nodes, train_nodes=target.training_nodes(server_mode),
        gpus_per_node=target.gpus_per_node, processes_per_node=target.processes_per_node(server_mode, processes),
        strategy=strategy, output_dir=str(config.get("output_dir") or "checkpoints"), pythonpath=pythonpath,
        partition=partition, account=account, time_limit=time_limit, resume_from=resume_from, requeue=requeue,
        vllm_port=int(config.get("vllm_server_port") or 8000) if server_mode else None)


def preflight(script: str, sbatch: str = "sbatch") -> None:
    """Before anything is written or submitted: the scheduler is there and `sbatch --test-only` takes the script
    (`sbatch`: the one the launch resolved, layout.scheduler); else UserInputError naming the field to change
    (partition, account, num_gpus / num_nodes, launcher)."""
    scheduler.require_scheduler()
    refusal = scheduler.check_submission(script, sbatch)
    if refusal:
        field, _, message = refusal.partition(": ")
        raise UserInputError(field, message)


def submit(run: Run, layout: SlurmLayout, node_plan: list[dict] | None, record: dict, script: str,
           trained: dict | None = None) -> dict:
    """Submit `script`, the text the launch wrote to train/launch.slurm after its gates (sbatch reads it from
    stdin, never the workspace's file), as a launch of its own: its id recorded outside the workspace before sbatch
    (evidence.record_launch, as a local launch's before its process starts: issue 48, an earlier launch's records
    replayed into the run are not this one's), exported to the job (its trainer and exit record tag what they
    write with it), and the job id sbatch answers bound into that record; a record that cannot be bound cancels
    the job. Then the launch record (run.json) with the job and the submission (and, for a GPU job, the memory
    plan per node: node_plan.node_table), written. `trained`: what the launch trains, kept in the signed record
    (launchers.base.trained_record)."""
    run.logs.mkdir(parents=True, exist_ok=True)  # the job's --output goes there
    launch_id = uuid.uuid4().hex
    record_launch(run.dir, launch_id, trained=trained)  # raises before anything is submitted
    sbatch = layout.scheduler.get("sbatch") or "sbatch"  # the one resolved for this launch, recorded below
    job_id = scheduler.submit(script, env={LAUNCH_ID_ENV: launch_id}, sbatch=sbatch)
    try:
        record_launch(run.dir, launch_id, job_id=job_id, job_comment=layout.comment, trained=trained)
    except UserInputError:
        scheduler.cancel(job_id)
        raise
    now = time.time()
    submission = {"job_id": job_id, "partition": layout.partition, "account": layout.account,
                  "nodes": layout.nodes, "gpus_per_node": layout.gpus_per_node, "time_limit": layout.time_limit,
                  "requeue": layout.requeue, "comment": layout.comment, "job_name": layout.job_name,
                  "command": [sbatch, "--parsable"], "stdin": str(run.slurm_script), "commands": dict(layout.scheduler),
                  "script_sha256": hashlib.sha256(script.encode()).hexdigest(), "plan_per_node": node_plan}
    record = {**record, "backend": "slurm", "state": "pending", "pid": None, "job_id": job_id, "slurm": submission,
              "cwd": str(run.dir), "started_ts": now, "launch_id": launch_id,
              "started_at": _dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat(timespec="seconds")}
    atomic_write_json(run.run_json, record)
    return record


# ---------------------------------------------------------------- status
def owns(job: scheduler.Job, run: Run, record: dict) -> str | None:
    """None when `job` is this run's job; else why not (in words). The ownership token is the one the launcher
    bound into its record outside the workspace (evidence.record_launch), else run.json's (a job submitted before
    that record existed)."""
    token = (launch_record(run.dir) or {}).get("job_comment")
    if token is None:
        token = (record.get("slurm") or {}).get("comment") if isinstance(record.get("slurm"), dict) else None
    try:
        same_dir = bool(job.work_dir) and Path(job.work_dir).resolve() == run.dir.resolve()
    except (OSError, ValueError):
        same_dir = False
    if job.name == run.name and same_dir and token and job.comment == token:
        return None
    return f"its name is {job.name!r}, its directory {job.work_dir or '?'}, its comment {job.comment or '(none)'!r}"


def recorded_job(run: Run, record: dict) -> tuple[str, str | None]:
    """(the job id of the run's current launch, a note): the one the launcher bound into its record outside the
    workspace at submission (evidence.record_launch), whatever run.json says (run.json is unsigned: a forger can
    point it at an earlier launch's job and token, issue 48); run.json's for a job submitted before that record
    existed."""
    named = str(record.get("job_id") or "")
    bound = (launch_record(run.dir) or {}).get("job_id")
    if bound is None or bound == named:
        return named, None
    return bound, (f"run.json names job {named or '(none)'}, which is not this run's: the launcher bound job "
                   f"{bound} to this launch (its record outside the workspace)")


def own_job(run: Run, record: dict) -> tuple[scheduler.Job | None, str | None]:
    """(this run's job as the scheduler knows it, or None; a note when run.json named a job that is not this run's
    or none at all)."""
    job_id, rebound = recorded_job(run, record)
    if not scheduler.available():
        return None, ("no SLURM commands on PATH here (scontrol not found): the job cannot be asked, so the state "
                      "is read from the launcher's records and the run's files")
    found = scheduler.job(job_id) if job_id else None
    if found is not None:
        why = owns(found, run, record)
        if why is None:
            return found, rebound
        note = (f"run.json names job {job_id}, which is not this run's ({why}): that job is neither reported nor "
                "touched")
    else:
        note = None if job_id else "run.json names no job id"
    if note is None:
        return None, rebound  # the scheduler forgot the job (it ended long ago): the files and run.json tell
    if rebound is not None:  # the launch's own job is not there as run.json describes it: no other job is taken
        return None, f"{rebound}; {note}"
    for other in scheduler.jobs_named(run.name):
        candidate = scheduler.job(other)
        if candidate is not None and owns(candidate, run, record) is None:
            return candidate, f"{note}; this run's own job is {other}"
    return None, note


def _newer(run: Run, path: Path, record: dict) -> dict | None:
    """The marker at `path` written since the launch, signed where it is (evidence.py) and of this launch (its
    launch id the launcher's record's: runrecord.signed_record), else None."""
    since = record.get("started_ts")
    data = signed_record(run, path, record)
    try:
        if data is None or (isinstance(since, (int, float)) and path.stat().st_mtime < since - 1):
            return None
    except OSError:
        return None
    return data


def _node_exits(run: Run, nodes: list[str]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for node in nodes:
        path = run.node_exit(node)
        if path.is_file():
            text = path.read_text(errors="replace").strip()
            out[node] = int(text) if text.lstrip("-").isdigit() else None
    return out


def failed_nodes(run: Run, job: scheduler.Job) -> list[str]:
    """The nodes a failed job failed on: those the scheduler holds down, else those whose launcher exited non-zero,
    else those that never reported an exit."""
    down = scheduler.down_nodes(job.nodes)
    if down:
        return down
    exits = _node_exits(run, job.nodes)
    bad = [n for n, rc in exits.items() if rc not in (0, None)]
    return bad or [n for n in job.nodes if n not in exits]


def _exit_code(run: Run, record: dict) -> int | None:
    """The exit code the job script recorded and signed (train/logs/exit.json) for this launch, None without one."""
    return read_exit_code(run, record)


def slurm_state(run: Run, record: dict) -> DerivedState:
    """derive_state for a SLURM run: the scheduler's word on the job, with the run's files (progress, markers)."""
    job, note = own_job(run, record)
    stop_requested = _newer(run, run.stop_request, record) is not None
    stopped = stop_requested or _newer(run, run.stopped, record) is not None
    outcome = _newer(run, run.outcome, record)
    exit_code = _exit_code(run, record)
    known = record.get("job") if isinstance(record.get("job"), dict) else {}
    if job is None:  # a run.json naming a foreign job: what it recorded of that job is not this run's
        scheduler_state = known.get("scheduler_state") if not note or not scheduler.available() else None
        view = dict(known) if scheduler_state else None
    else:
        scheduler_state = job.state
        view = {"job_id": job.job_id, "scheduler_state": job.state, "reason": job.reason, "nodes": job.nodes,
                "partition": job.partition, "exit_code": job.exit_code, "restarts": job.restarts,
                "source": job.source, "failed_nodes": [],
                "node_env": [str(run.node_env(n)) for n in job.nodes if run.node_env(n).is_file()]}
        if job.state in FAILED:
            view["failed_nodes"] = failed_nodes(run, job)
        sub = record.get("slurm") if isinstance(record.get("slurm"), dict) else {}
        if sub.get("plan_per_node") and job.nodes:  # the memory plan next to the nodes the job landed on
            view["plan_per_node"] = [{**row, "node": job.nodes[row["index"]] if row["index"] < len(job.nodes)
                                      else None} for row in sub["plan_per_node"]]
    alive = scheduler_state in scheduler.ACTIVE
    if scheduler_state in PENDING:
        state = "pending"
    elif alive:
        state = ("stopping" if stop_requested else "running" if _newer(run, run.train_begin, record) is not None
                 else "starting")
    elif scheduler_state == "COMPLETED" or (scheduler_state is None and (outcome or exit_code is not None)):
        state = (outcome or {}).get("state") if (outcome or {}).get("state") in ("succeeded", "stopped") else (
            "stopped" if stopped else "failed")
        failure = (stop_failure(run, record, exit_code) if state == "stopped" and not outcome
                   and exit_code not in (None, 0) else None)  # a save that failed at the stop (local: the same)
        if failure:
            state, note = "failed", "; ".join(filter(None, [note, failure]))
        problems = success_problems(run, record) if state == "succeeded" else []
        if state == "succeeded" and (exit_code not in (None, 0) or problems):
            state = "failed"  # crashed after the save, or an outcome the run's evidence does not bear out
            if problems:
                note = "; ".join(filter(None, [note, "outcome.json says succeeded but the run's own evidence does "
                                                     "not: " + "; ".join(problems[:3])]))
    elif scheduler_state == "CANCELLED":  # stopped only when stop_training asked; scancel by hand: cancelled
        state = "stopped" if stop_requested else "cancelled"
    elif scheduler_state in STATE_OF:
        state = STATE_OF[scheduler_state]
    elif scheduler_state in FAILED:
        # A stop the trainer carried out (its outcome says stopped, after stop_training asked) can end the job
        # FAILED: a rank that leaves the rendezvous after the save exits non-zero. The stop is what happened.
        asked_and_done = stop_requested and (outcome or {}).get("state") == "stopped"
        state = "stopped" if asked_and_done and scheduler_state == "FAILED" else "failed"
    elif scheduler_state is not None:  # a state this version does not know (a newer SLURM's): said as it is
        state, note = "unknown", note or (f"the scheduler reports job {record.get('job_id')} as {scheduler_state}, a "
                                          "job state llm-finetuning does not know: ask it with scontrol show job")
    else:
        state, note = "unknown", note or (f"the scheduler no longer knows job {record.get('job_id')} and the logs "
                                          "do not say how it ended (accounting off?)")
    if not alive:  # end records there but unsigned, or of an earlier launch (copied back): named, not read
        note = end_notes(run, note, record)
    if exit_code is None and view and view.get("exit_code") is not None and not alive:
        exit_code = view["exit_code"]
    if view is not None and view != known:
        record = {**record, "job": view}
        if job is not None and str(job.job_id) != str(record.get("job_id")):
            record = {**record, "job_id": job.job_id, "reconstructed": True}
    return DerivedState(state=state, alive=alive, exit_code=exit_code if not alive else None, outcome=outcome,
                        stop_requested=stop_requested, record=record, note=note, view=view,
                        running_as=f"SLURM job {view['job_id']}" if view and view.get("job_id") else None)


def job_message(derived: DerivedState) -> str:
    """What the scheduler adds to training_status's message: why pending, on which nodes, where it failed."""
    view = derived.view or {}
    if not view:
        return ""
    state, job_id = derived.state, view.get("job_id")
    if state == "pending":
        return f" (job {job_id} pending: {view.get('reason') or 'no reason given'})"
    sub = (derived.record or {}).get("slurm")
    planned = beside_scheduler((sub.get("plan_per_node") if isinstance(sub, dict) else None) or [],
                               view.get("nodes") or [])
    if state in ("running", "starting", "stopping"):
        return f" (job {job_id} on {','.join(view.get('nodes') or []) or '?'}{planned})"
    if state == "failed":
        nodes = ",".join(view.get("failed_nodes") or []) or "?"
        return (f" (job {job_id} {view.get('scheduler_state')} on node {nodes}; see train/logs/node-<node>.log"
                f"{planned})")
    if state in ("cancelled", "timed_out", "preempted"):
        return f" (job {job_id} {view.get('scheduler_state')} by the scheduler or by hand, not by stop_training)"
    return f" (job {job_id} {view.get('scheduler_state')})"


# ---------------------------------------------------------------- stop
def _wait_ended(run: Run, record: dict, timeout: float) -> bool:
    deadline = time.time() + timeout
    while True:
        job, _ = own_job(run, record)
        if job is None or not job.active:
            return True
        if time.time() >= deadline:
            return False
        time.sleep(1.0)


def stop_job(run: Run, derived: DerivedState, timeout_s: float, kill: bool = True) -> tuple[bool, bool, str]:
    """Ask this run's job for a checkpoint (stop-request file + USR1 to its steps, which the trainer turns into a
    save at the next step end), wait for the job to end; scancel it after `timeout_s` when `kill`, else leave it
    finishing its step. Only a job verified to be this run's (owns) is signalled. (graceful, cancelled, note)."""
    record = derived.record or {}
    job, note = own_job(run, record)
    if job is None or not job.active:
        return False, False, note or "the job is not active"
    launch = launch_of(run, record)  # this launch's request, never read as a later one's
    atomic_write_json(run.stop_request, sign_run(run, run.stop_request, {"requested_at": _dt.datetime.now(
        _dt.timezone.utc).isoformat(timespec="seconds"), "time": time.time(), "wait_s": timeout_s, "job_id": job.job_id,
        **({"launch_id": launch} if launch else {})}, create=True))
    if job.state in PENDING:  # nothing runs yet: no checkpoint to ask for
        scheduler.cancel(job.job_id)
        return False, True, note or f"job {job.job_id} was still pending: cancelled"
    if _newer(run, run.train_begin, record) is not None:  # the trainer catches USR1 from then on
        scheduler.cancel(job.job_id, signal="USR1")
    if _wait_ended(run, record, timeout_s):
        return True, False, note or ""
    if not kill:
        return False, False, note or ""
    again, _ = own_job(run, record)
    if again is not None and again.active:
        scheduler.cancel(again.job_id)
        _wait_ended(run, record, STOP_GRACE_S)
    return False, True, note or ""


def describe(record: dict) -> str:
    """One line of a SLURM launch for a LaunchResult message."""
    sub = record.get("slurm") or {}
    return (f"submitted job {record.get('job_id')} ({sub.get('nodes')} node(s)"
            + (f", partition {sub['partition']}" if sub.get("partition") else "")
            + (f", {sub['gpus_per_node']} GPU(s) per node" if sub.get("gpus_per_node") else ", CPU")
            + "); follow it with training_status")

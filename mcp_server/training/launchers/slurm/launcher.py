"""The SLURM launcher on the seam: a job for one or more nodes (train/launch.slurm), checked with
`sbatch --test-only`, submitted with sbatch, read back from the scheduler and stopped through it. The job's
layout and script are script.py's, the memory plan per node node_plan.py's, the scheduler's commands
scheduler.py's and the record, status and stop job.py's (docs/slurm.md). What only this backend plans (the
layout, the rows per node, whether to submit) travels in the plan as a SlurmDetails."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from mcp_server.runs import Run
from mcp_server.training.derived import DerivedState
from mcp_server.training.launchers.base import (
    ACCELERATE_TEXT_ENV,
    REFUSED_EXIT,
    TRAIN_ARGS,
    TRL_ACCELERATE_CONFIGS,
    LaunchPlan,
    LaunchTarget,
    Start,
    history,
    mixed_precision,
    refuse_foreign_launch_files,
    trained_record,
    trainer_pythonpath,
    trl_accelerate_config,
    verdict_env,
    verdict_shell_pins,
    with_python_check,
    write_accelerate,
)
from mcp_server.training.launchers.machine import plan_launch_memory
from mcp_server.training.models import LaunchRequest, LaunchResult, StopResult
from mcp_server.training.runrecord import derive_with, sync_run_json
from mcp_server.training.stopping import stop_result
from mcp_server.training.launchers.slurm.job import (
    describe,
    job_message,
    layout_for,
    preflight,
    slurm_state,
    stop_job,
    submit,
)
from mcp_server.training.launchers.slurm.node_plan import comment_block, node_table
from mcp_server.training.launchers.slurm.script import SlurmLayout, render_sbatch, with_pins
from mcp_server.inspection.trained import REWARD_SHA_ENV
from mcp_server.workspace import atomic_write_text, baseline_hashes, sha256_file


@dataclass(frozen=True)
class SlurmDetails:
    """The SLURM part of a LaunchPlan (LaunchPlan.details): the job's layout, the memory plan per node of a GPU job
    (node_plan.node_table), and whether to submit (false: only write the script; a resume always submits)."""

    layout: SlurmLayout
    node_plan: list[dict] | None
    submit: bool


class SlurmLauncher:
    name = "slurm"
    checks_environment = False  # the job runs on the cluster's nodes, not on this machine

    def accepts(self, target: LaunchTarget) -> bool:
        launcher = target.request.launcher
        return launcher == "slurm" or (launcher == "auto" and target.request.num_nodes > 1)

    def plan(self, target: LaunchTarget) -> LaunchPlan:
        """With vLLM server mode the last node serves, the others train (the open-r1 layout); a CPU target trains
        on every node with torchrun over gloo."""
        request, config = target.request, target.config
        layout = layout_for(target.run, target.run_request, config, target=target.target,
                            processes=request.num_processes, strategy=request.strategy,
                            server_mode=target.server_mode, python=target.python, pythonpath=trainer_pythonpath(),
                            partition=request.partition, account=request.account, time_limit=request.time_limit,
                            resume_from=target.resume_from, requeue=request.requeue)
        memory, notes, plan = None, [], None
        if not layout.cpu:  # the memory plan for the GPUs of every node (vLLM's node included): per-GPU peak, fits
            plan, note = plan_launch_memory(target.run, target.spec, request)  # the target's world and server
            memory = plan.launch if plan else None
            notes = [note] if note else [f"memory plan: {memory.reason}"]
            if memory is not None and request.strategy == "auto" and memory.strategy in TRL_ACCELERATE_CONFIGS:
                layout = dataclasses.replace(layout, strategy=memory.strategy)  # the least sharding that fits
        accel = None
        if not layout.cpu:
            accel = trl_accelerate_config(TRL_ACCELERATE_CONFIGS[layout.strategy])
            accel.update(num_processes=layout.processes, num_machines=layout.train_nodes,
                         mixed_precision=mixed_precision(config))
        vllm = {"node": "last", "gpus": layout.gpus_per_node, "port": layout.vllm_port,
                "tensor_parallel_size": layout.gpus_per_node} if layout.vllm_port else None
        rows = node_table(plan, layout) if plan is not None else None
        head = comment_block(rows, plan) if rows else None
        extra = list(target.extra)
        script = render_sbatch(layout, str(config.get("model_name_or_path")), extra[2:] if target.resume_from
                               else extra, head)
        launcher = "torch.distributed.run" if layout.cpu else "accelerate.commands.launch"
        details = SlurmDetails(layout=layout, node_plan=rows,
                               submit=request.submit or target.resume_from is not None)
        return LaunchPlan(launcher=self.name, strategy=layout.strategy, num_processes=layout.processes,
                          num_nodes=layout.nodes, train_command=["srun", launcher, *TRAIN_ARGS, *extra], script=script,
                          accelerate_config=accel, vllm=vllm, memory=memory, notes=notes, details=details)

    def check(self, plan: LaunchPlan) -> None:
        if plan.details.submit:
            # the scheduler is there and would take the job: else one line, nothing written
            preflight(plan.script, plan.details.layout.scheduler.get("sbatch") or "sbatch")

    def write(self, run: Run, plan: LaunchPlan) -> dict[str, str]:
        """train/accelerate.yaml and train/launch.slurm, with the verdict's pins as the gates saw them (the job's
        trainer checks against them, as the local launcher's: launchers.base.verdict_env)."""
        refuse_foreign_launch_files(run, plan, run.slurm_script, "submitted by llm-finetuning launch_training")
        python_pin, loader_pin = verdict_shell_pins(plan.verdict)
        accelerate = write_accelerate(run, plan)  # its text goes in the job's environment, as the pins do
        text = {k: v for k, v in accelerate.items() if k == ACCELERATE_TEXT_ENV}
        script = with_python_check(with_pins(plan.script, {**verdict_env(plan.verdict), **text}),
                                   plan.details.layout.python,
                                   python_pin, REFUSED_EXIT, loader_pin)
        return {**accelerate, "slurm": str(atomic_write_text(run.slurm_script, script)), "slurm_text": script}

    def recorded(self, run: Run) -> list[Path]:
        return [run.config, run.script, run.slurm_script, run.accelerate]

    def commit_message(self, run: Run, resumed: bool, config_sha256: str) -> str:
        return f"llm-finetuning: {'resume ' + run.name + ' on SLURM' if resumed else 'SLURM script for ' + run.name}"

    def start(self, run: Run, plan: LaunchPlan, written: dict[str, str], start: Start) -> LaunchResult:
        """sbatch the written script and record the job in run.json (submit=false: the script only)."""
        config_sha, script_sha = start.config_sha256 or sha256_file(run.config), sha256_file(run.script)
        details: SlurmDetails = plan.details
        if not details.submit:
            return LaunchResult(
                launched=False, run_dir=str(run.dir), state=start.state_before,
                command=plan.train_command, config_sha256=config_sha, train_script_sha256=script_sha,
                git_commit=start.commit, accelerate_config=written.get("accelerate_config"),
                slurm_script=written["slurm"], vllm_server=plan.vllm,
                message=f"{plan.num_nodes} node(s): wrote {written['slurm']} (not submitted); submit it with `sbatch "
                        "train/launch.slurm` from the run directory")
        record = submit(run, details.layout, details.node_plan, {
            "command": plan.train_command, "python": details.layout.python, "config_sha256": config_sha,
            "launched_config": start.config_values,
            "train_script_sha256": script_sha, "reward_code_sha256": verdict_env(plan.verdict).get(REWARD_SHA_ENV),
            "git_commit": start.commit, "strategy": plan.strategy, "num_processes": plan.num_processes,
            "num_nodes": plan.num_nodes, "accelerate_config": written.get("accelerate_config"),
            "vllm_server": plan.vllm, "resumed_from": start.resumed_from, "resume_patch": start.patch,
            "history": history(start.previous), "baselines": baseline_hashes()}, written["slurm_text"],
            trained=trained_record(run, config_sha, verdict_env(plan.verdict), plan.verdict))
        return LaunchResult(
            launched=True, run_dir=str(run.dir), state="pending", command=plan.train_command,
            config_sha256=config_sha, train_script_sha256=script_sha, git_commit=start.commit,
            log_path=str(run.stdout), accelerate_config=written.get("accelerate_config"), vllm_server=plan.vllm,
            slurm_script=written["slurm"], job_id=record["job_id"], resumed_from=start.resumed_from,
            message=f"{'resumed' if start.resumed_from else 'started'} {run.name}: {describe(record)}")

    def state(self, run: Run, record: dict | None) -> DerivedState:
        """The scheduler's word on the run's own job, with the run's files (job.slurm_state)."""
        return slurm_state(run, record or {})

    def status_text(self, derived: DerivedState) -> str:
        """Why the job is pending, on which nodes it runs, where it failed (job.job_message)."""
        return job_message(derived)

    def stop(self, run: Run, derived: DerivedState, timeout_s: float, config: dict, note: str,
             kill: bool = False) -> StopResult:
        """Its own job (verified) is asked for a checkpoint; cancelled after the timeout only with `kill`."""
        began = time.time()
        graceful, cancelled, why = stop_job(run, derived, timeout_s, kill)
        after = sync_run_json(run, derive_with(run, self.state))
        job = (after.view or {}).get("job_id") or derived.record.get("job_id")
        return stop_result(run, after, config, graceful, cancelled, round(time.time() - began, 1), timeout_s,
                           note + (f" ({why})" if why else ""), who=f"{run.name} (job {job})")

    def relaunch(self, record: dict, run_ref: str) -> LaunchRequest:
        sub = record.get("slurm") if isinstance(record.get("slurm"), dict) else {}
        request = LaunchRequest(run=run_ref, num_processes=record.get("num_processes"),
                                strategy=record.get("strategy") or "auto", num_nodes=sub.get("nodes") or 1,
                                launcher="slurm", partition=sub.get("partition"), account=sub.get("account"),
                                time_limit=sub.get("time_limit"), requeue=sub.get("requeue", True))
        if (record.get("num_processes") or 0) > 1:  # the record holds the job's total: the request, per node
            request.num_processes = max(record["num_processes"] // max(sub.get("nodes") or 1, 1), 1)
        return request

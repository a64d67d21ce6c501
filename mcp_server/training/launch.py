"""launch_training and resume_training: gates, then a detached training process that outlives the server.

Every launch writes train/launch.sh, a short readable script that runs the whole thing from the run directory
(vLLM server first when the config asks for server mode, then training) and records the exit code; the
server starts it in a new session with stdout/stderr to train/logs/stdout.log and returns at once. A person can
run the same script by hand. Several nodes (or launcher=slurm): train/launch.slurm is written, checked with
`sbatch --test-only` and submitted; the SLURM launcher (slurm_launcher.py, docs/slurm.md) records the job in
run.json and answers for its status and stop.

Launchers by case (the training interpreter is LLM_FINETUNING_PYTHON, else the server's Python):
- one process (one GPU or CPU):      python train/train.py --config train/config.yaml
- several GPUs:                      accelerate launch --config_file train/accelerate.yaml train/train.py ...
                                     (train/accelerate.yaml = TRL's bundled zero2/zero3/fsdp2/multi_gpu config)
- several CPU processes:             torchrun --standalone --nproc_per_node N train/train.py ... (DDP over gloo;
                                     `accelerate launch --cpu` starts only one process without MPI)
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.resources as resources
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml

from mcp_server.errors import UserInputError
from mcp_server.inspection.gate import check_inspection_gate
from mcp_server.inspection.trained import REWARD_SHA_ENV, verdict_reward_sha256
from mcp_server.interpreter import require_training_python as training_python
from mcp_server.interpreter import package_path, training_env
from mcp_server.memory.models import LaunchLayout, MemoryPlan, MemoryPlanRequest
from mcp_server.memory.planner import plan_memory
from mcp_server.recipe.models import ValidateRequest
from mcp_server.recipe.validate import validate_config
from mcp_server.runs import Run, read_json_if_present, resolve_run
from mcp_server.training.derived import DerivedState
from mcp_server.training.environment import check_environment, read_run_target
from mcp_server.training.models import EnvironmentRequest, GateRefusal, LaunchRequest, LaunchResult, RunRequest
from mcp_server.training.resume_patch import apply_patch, last_good_checkpoint
from mcp_server.training.runlock import RunLocked, run_lock
from mcp_server.training.slurm_launcher import describe as describe_job
from mcp_server.training.slurm_launcher import layout_for, preflight
from mcp_server.training.slurm_launcher import submit as submit_job
from mcp_server.training.slurm_plan import comment_block, node_table
from mcp_server.training.slurm_script import SlurmLayout, render_sbatch
from mcp_server.training.runstate import (
    LAUNCHER,
    RUN_MARK,
    checkpoints,
    derive_state,
    read_run_json,
    verified_launcher,
    write_run_json,
)
from mcp_server.workspace import atomic_write_text, runs_root, sha256_file

TRAIN_ARGS = ["train/train.py", "--config", "train/config.yaml"]
VLLM_HEALTH_TIMEOUT_S = 900  # loading a large model into vLLM takes minutes
TRL_ACCELERATE_CONFIGS = {"ddp": "multi_gpu", "zero2": "zero2", "zero3": "zero3", "fsdp": "fsdp2"}
VLLM_SERVE_GPU_MEMORY_UTILIZATION = 0.9  # trl/scripts/vllm_serve.py's default, when no plan says otherwise


@dataclass
class LaunchPlan:
    """What will run, before anything runs: the commands, the files to write, the choices made."""

    strategy: str
    num_processes: int
    num_nodes: int
    train_command: list[str]
    script: str
    accelerate_config: dict | None = None
    vllm: dict | None = None
    slurm: str | None = None
    notes: list[str] = field(default_factory=list)
    memory: LaunchLayout | None = None  # the memory plan's layout this launch follows (None: not planned)
    slurm_layout: SlurmLayout | None = None  # a SLURM job's layout (nodes, GPUs per node, partition, ...)
    node_plan: list[dict] | None = None  # a SLURM GPU job: memory and speed per node (slurm_plan.node_table)


# ---------------------------------------------------------------- planning
def _mixed_precision(config: dict) -> str:
    return "bf16" if config.get("bf16") else ("fp16" if config.get("fp16") else "no")


def trl_accelerate_config(name: str) -> dict:
    """One of TRL's bundled accelerate configs (trl/accelerate_configs/<name>.yaml) as a dict."""
    source = resources.files("trl.accelerate_configs").joinpath(f"{name}.yaml")
    return yaml.safe_load(source.read_text(encoding="utf-8"))


def _choose_strategy(request: LaunchRequest, run_request: dict, processes: int, cpu: bool,
                     layout: LaunchLayout | None = None) -> str:
    if request.strategy != "auto":
        return request.strategy
    if processes == 1:
        return "single"
    if layout is not None and layout.strategy in TRL_ACCELERATE_CONFIGS:
        return layout.strategy  # the sharding the memory plan found to fit
    if cpu or run_request.get("finetune") in ("lora", "qlora"):
        return "ddp"  # adapters are small: plain data parallel; DeepSpeed and 4-bit bases do not mix well
    return "zero2"


def plan_launch_memory(run_dir: Path, request: LaunchRequest, num_gpus: int,
                       vllm_gpus: int) -> tuple[MemoryPlan | None, str | None]:
    """The run's memory plan for this launch (the same GPUs, vLLM server GPUs and strategy), or (None, why not).
    Prompts are planned at the longest one the inspection measured (samples.meta.json; the launch gate needs an
    inspection), else at the planner's default."""
    meta = read_json_if_present(Run(run_dir).samples_meta)
    lengths = meta.get("lengths") if isinstance(meta, dict) and isinstance(meta.get("lengths"), dict) else {}
    prompt = lengths.get("prompt_tokens_max") if isinstance(lengths.get("prompt_tokens_max"), int) else None
    try:
        plan = plan_memory(MemoryPlanRequest(
            config_path=str(run_dir), num_gpus=num_gpus, validate_levers=False, prompt_length=prompt or None,
            vllm_server_gpus=vllm_gpus or None,
            strategy=request.strategy if request.strategy not in ("auto", "single") else None))
    except UserInputError as exc:  # e.g. a hub model neither cached nor in the catalog
        return None, f"memory not planned ({exc}): the launcher's default layout is used"
    return plan, None


def build_launch_plan(run_dir: Path, request: LaunchRequest, extra_args: list[str] | None = None) -> LaunchPlan:
    """Decide launcher, process counts and GPU split for the run's target (train/request.json)."""
    run_request, config = read_run_target(Run(run_dir))
    python = training_python()
    py = shlex.quote(python)  # for the script's own lines; argv lists hold the plain path
    extra = [str(a) for a in (extra_args or [])]
    target_gpu = str(run_request.get("gpu") or "H100")
    cpu = target_gpu.lower() == "cpu"
    num_gpus = int(run_request.get("num_gpus") or 1)
    nodes = request.num_nodes
    server_mode = bool(config.get("use_vllm")) and config.get("vllm_mode") == "server" and not cpu
    vllm_gpus = (request.vllm_server_gpus if request.vllm_server_gpus is not None else 1) if server_mode else 0
    if server_mode and vllm_gpus == 0:
        raise UserInputError("vllm_server_gpus", "the config uses vllm_mode: server, which needs at least 1 GPU for "
                                                 "the vLLM server")

    if request.launcher == "slurm" or (request.launcher == "auto" and nodes > 1):
        return _slurm_plan(run_dir, request, run_request, config, server_mode, extra)
    if nodes > 1:
        raise UserInputError("launcher", "launcher=local runs on one machine: num_nodes 1, or launcher slurm")

    if request.num_processes is not None:
        processes = request.num_processes
    else:
        processes = 1 if cpu else max(num_gpus - vllm_gpus, 1)
    memory, memory_note = (None, None) if cpu else plan_launch_memory(run_dir, request, processes + vllm_gpus,
                                                                      vllm_gpus)
    layout = memory.launch if memory else None
    if server_mode and processes + vllm_gpus > num_gpus:
        raise UserInputError(
            "vllm_server_gpus",
            f"{processes} training processes + {vllm_gpus} vLLM GPUs exceed the run's {num_gpus} GPUs: give the "
            "server fewer GPUs, or use vllm_mode: colocate",
        )
    strategy = "single" if processes == 1 else _choose_strategy(request, run_request, processes, cpu, layout)
    if strategy == "single":
        processes = 1

    notes: list[str] = [memory_note] if memory_note else []
    if layout is not None:
        notes.append(f"memory plan: {layout.reason}")
    accel = None
    if strategy == "single":
        train_command = [python, *TRAIN_ARGS, *extra]
    elif cpu:
        notes.append("CPU: DDP over gloo with torchrun (accelerate launch --cpu starts one process without MPI)")
        train_command = [
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(processes),
            *TRAIN_ARGS,
            *extra,
        ]
    else:
        accel = trl_accelerate_config(TRL_ACCELERATE_CONFIGS[strategy])
        accel.update(num_processes=processes, num_machines=1, machine_rank=0, mixed_precision=_mixed_precision(config))
        train_command = [
            python,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            "train/accelerate.yaml",
            *TRAIN_ARGS,
            *extra,
        ]

    vllm = None
    lines = [_script_header(run_dir), "LOGS=train/logs", 'mkdir -p "$LOGS"', "VLLM_PID="]
    if cpu:
        # transformers puts a run on the CPU (and torchrun ranks in a gloo group) only when told: without
        # this, each torchrun rank would train alone as a world of one.
        lines.append("export ACCELERATE_USE_CPU=1")
    if server_mode:
        port = int(config.get("vllm_server_port") or 8000)
        train_ids = ",".join(str(i) for i in range(processes))
        vllm_ids = ",".join(str(i) for i in range(processes, processes + vllm_gpus))
        server = layout.vllm_server if layout is not None and layout.vllm_server else None
        tp = server.tensor_parallel_size if server else vllm_gpus
        dp = server.data_parallel_size if server else 1
        util = server.gpu_memory_utilization if server else VLLM_SERVE_GPU_MEMORY_UTILIZATION
        vllm = {"gpus": vllm_ids, "port": port, "url": f"http://127.0.0.1:{port}",
                "log": "train/logs/vllm-serve.log", "tensor_parallel_size": tp, "data_parallel_size": dp,
                "gpu_memory_utilization": util}
        model = str(config.get("model_name_or_path"))
        lines += [
            "# vLLM server mode: `trl vllm-serve` on its own GPUs, started first and waited for; its sizes are the",
            "# memory plan's (plan_memory: launch.vllm_server).",
            f"CUDA_VISIBLE_DEVICES={vllm_ids} {py} -m trl.cli.main vllm-serve --model {shlex.quote(model)} "
            f"--tensor_parallel_size {tp} --data_parallel_size {dp} --gpu_memory_utilization {util:g} "
            f"--port {port} > train/logs/vllm-serve.log 2>&1 &",
            "VLLM_PID=$!",
            f"echo \"waiting for the vLLM server on port {port} (pid $VLLM_PID)\"",
            f"deadline=$((SECONDS + {VLLM_HEALTH_TIMEOUT_S}))",
            f"until {py} -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health', "
            "timeout=5)\" 2>/dev/null; do",
            "  if ! kill -0 \"$VLLM_PID\" 2>/dev/null || [ $SECONDS -ge $deadline ]; then",
            "    echo \"vLLM server did not come up: see train/logs/vllm-serve.log\"; tail -n 30 "
            "train/logs/vllm-serve.log",
            "    kill \"$VLLM_PID\" 2>/dev/null; rc=97; echo $rc > \"$LOGS/.exit-code.tmp\" && mv "
            "\"$LOGS/.exit-code.tmp\" \"$LOGS/exit-code\"; exit $rc",
            "  fi",
            "  sleep 5",
            "done",
            "echo \"vLLM server is up\"",
            f"export CUDA_VISIBLE_DEVICES={train_ids}",
        ]
    lines += [
        "# Training; the exit code is recorded for training_status.",
        shlex.join(train_command),
        "rc=$?",
        '[ -n "$VLLM_PID" ] && kill "$VLLM_PID" 2>/dev/null',
        'echo $rc > "$LOGS/.exit-code.tmp" && mv "$LOGS/.exit-code.tmp" "$LOGS/exit-code"',
        "exit $rc",
    ]
    return LaunchPlan(strategy=strategy, num_processes=processes, num_nodes=1, train_command=train_command,
                      script="\n".join(lines) + "\n", accelerate_config=accel, vllm=vllm, notes=notes,
                      memory=layout)


def _pythonpath_line() -> list[str]:
    """train.py imports this package: a script run by hand or by sbatch finds it in the plugin folder when the
    training interpreter does not have it installed (as the launcher's own environment does)."""
    path = package_path()
    return [f'export PYTHONPATH={shlex.quote(path)}"${{PYTHONPATH:+:$PYTHONPATH}}"'] if path else []


def _script_header(run_dir: Path) -> str:
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# Training launcher for run {run_dir.name}, written by llm-finetuning launch_training.",
        "# Runs from the run directory wherever it is called from: bash train/launch.sh",
        'cd "$(dirname "$0")/.." || exit 1',
        "# Every process of the run carries its directory: training_status finds a trainer that outlived this script.",
        f'export {RUN_MARK}="$(pwd -P)"',
        "# Caches a library would write under your home (an arrow copy of the data, matplotlib's) stay in the run.",
        '[ -n "$HF_DATASETS_CACHE$HF_HOME" ] || export HF_DATASETS_CACHE="$PWD/cache/datasets"',
        'export MPLCONFIGDIR="${MPLCONFIGDIR:-$PWD/cache/matplotlib}"',
        "export PYTHONUNBUFFERED=1",
        *_pythonpath_line(),
    ])


def _slurm_plan(run_dir: Path, request: LaunchRequest, run_request: dict, config: dict, server_mode: bool,
                extra: list[str]) -> LaunchPlan:
    """A SLURM job (slurm_launcher.layout_for, slurm_script.render_sbatch): with vLLM server mode the last node
    serves, the others train (the open-r1 layout); a CPU target trains on every node with torchrun over gloo."""
    resume_from = extra[1] if extra[:1] == ["--resume_from_checkpoint"] else None
    layout = layout_for(Run(run_dir), run_request, config, nodes=request.num_nodes, processes=request.num_processes,
                        strategy=request.strategy, server_mode=server_mode, python=training_python(),
                        pythonpath=package_path(), partition=request.partition, account=request.account,
                        time_limit=request.time_limit, resume_from=resume_from, requeue=request.requeue)
    memory, notes, plan = None, [], None
    if not layout.cpu:  # the memory plan for the GPUs of every node (vLLM's node included): per-GPU peak, fits
        vllm_gpus = layout.gpus_per_node if layout.vllm_port else 0
        plan, note = plan_launch_memory(run_dir, request, layout.processes + vllm_gpus, vllm_gpus)
        memory = plan.launch if plan else None
        notes = [note] if note else [f"memory plan: {memory.reason}"]
        if memory is not None and request.strategy == "auto" and memory.strategy in TRL_ACCELERATE_CONFIGS:
            layout = dataclasses.replace(layout, strategy=memory.strategy)  # the least sharding that fits
    accel = None
    if not layout.cpu:
        accel = trl_accelerate_config(TRL_ACCELERATE_CONFIGS[layout.strategy])
        accel.update(num_processes=layout.processes, num_machines=layout.train_nodes,
                     mixed_precision=_mixed_precision(config))
    vllm = {"node": "last", "gpus": layout.gpus_per_node, "port": layout.vllm_port,
            "tensor_parallel_size": layout.gpus_per_node} if layout.vllm_port else None
    rows = node_table(plan, layout) if plan is not None else None
    head = comment_block(rows, plan) if rows else None
    script = render_sbatch(layout, str(config.get("model_name_or_path")), extra[2:] if resume_from else extra, head)
    launcher = "torch.distributed.run" if layout.cpu else "accelerate.commands.launch"
    return LaunchPlan(strategy=layout.strategy, num_processes=layout.processes, num_nodes=layout.nodes,
                      train_command=["srun", launcher, *TRAIN_ARGS, *extra], script="", accelerate_config=accel,
                      vllm=vllm, slurm=script, slurm_layout=layout, memory=memory, notes=notes,
                      node_plan=rows)


def write_plan_files(run_dir: Path, plan: LaunchPlan) -> dict:
    """train/launch.sh (or train/launch.slurm) and train/accelerate.yaml, as the plan says."""
    run = Run(run_dir)
    written = {}
    if plan.accelerate_config is not None:
        path = run.accelerate
        atomic_write_text(path, "# From TRL's bundled accelerate configs, sized for this run by llm-finetuning.\n"
                          + yaml.safe_dump(plan.accelerate_config, sort_keys=True))
        written["accelerate_config"] = str(path)
    if plan.slurm:
        written["slurm"] = str(atomic_write_text(run.slurm_script, plan.slurm))
    else:
        path = atomic_write_text(run.launch_script, plan.script)
        path.chmod(0o755)
        written["script"] = str(path)
    return written


# ---------------------------------------------------------------- gates
def check_gates(run_dir: Path, environment: bool = True) -> tuple[list[GateRefusal], dict]:
    """Every gate's answer (all of them, so one call tells everything to fix); the env report too.
    `environment=False` for a SLURM script: it runs on the cluster, not on this machine."""
    refusals: list[GateRefusal] = []
    gate = check_inspection_gate(run_dir)
    if not gate.passed:
        refusals.append(GateRefusal(gate="inspection", message=gate.reason, how_to_clear=gate.how_to_clear))

    cfg_path = Run(run_dir).config
    run_request, _ = read_run_target(Run(run_dir))
    if not cfg_path.exists() or not Run(run_dir).script.exists():
        refusals.append(GateRefusal(
            gate="config", message=f"{run_dir.name} has no train/config.yaml and train/train.py",
            how_to_clear="emit the run with emit_grpo_config (CLI: llm-finetuning emit-config)"))
    else:
        result = validate_config(ValidateRequest(
            config_path=str(cfg_path), gpu=run_request.get("gpu"), num_gpus=run_request.get("num_gpus")))
        if not result.valid:
            errors = [f for f in result.findings if f.severity == "error"]
            refusals.append(GateRefusal(
                gate="config",
                message=f"train/config.yaml does not validate for {result.target}: "
                + "; ".join(f"{f.code} [{f.field}]: {f.message}" for f in errors),
                how_to_clear="apply the fixes: " + "; ".join(f.fix or f.code for f in errors)
                + " (edit train/config.yaml or re-emit it), until validate_grpo_config says valid"))

    if not environment:
        return refusals, {}
    env = check_environment(EnvironmentRequest(run=str(run_dir)))
    if env.verdict == "blocked":
                refusals.append(GateRefusal(
            gate="environment", message="this machine cannot run it: " + "; ".join(env.blockers),
            how_to_clear=f"fix what {env.report_path} lists as blocking (or launch on the target machine), "
            "then check_environment until it is not blocked"))
    return refusals, env.model_dump(mode="json")


def memory_refusals(plan: LaunchPlan) -> list[GateRefusal]:
    """The memory plan's verdict on this layout: a run that will not fit is refused with the plan's reason."""
    if plan.memory is None or plan.memory.fits:
        return []
    return [GateRefusal(gate="memory", message=f"the run will not fit: {plan.memory.reason}",
                        how_to_clear="plan_memory on the run lists the levers and the smallest set that fits; apply it "
                        "to train/config.yaml (or re-emit), or target more or bigger GPUs")]


# ---------------------------------------------------------------- recording
GIT_TIMEOUT_S = 60
FALLBACK_IDENTITY = ("llm-finetuning", "llm-finetuning@localhost")


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """One git command that cannot wait on a person: no stdin, no credential prompt, a timeout (a hook or a
    signing agent that hangs reads as a failure, returncode 124)."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {GIT_TIMEOUT_S}s")


def _git_identity(run_dir: Path) -> list[str]:
    """[] when git knows who commits (config, GIT_AUTHOR_*/GIT_COMMITTER_* or EMAIL); else `-c` options that
    complete the identity with llm-finetuning's own, keeping a user.name or user.email that is set."""
    if all(_git(["var", ident], run_dir).returncode == 0 for ident in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT")):
        return []
    name = _git(["config", "user.name"], run_dir).stdout.strip() or FALLBACK_IDENTITY[0]
    email = _git(["config", "user.email"], run_dir).stdout.strip() or FALLBACK_IDENTITY[1]
    return ["-c", f"user.name={name}", "-c", f"user.email={email}"]


def record_in_git(run_dir: Path, files: list[Path], message: str) -> str | None:
    """Commit the run's recipe files when the run lives in a git repository; the commit id (HEAD when they
    were already committed), or None (not a repo, git absent, the run is git-ignored, or git refused or hung).
    Without a git identity configured the commit is made as llm-finetuning <llm-finetuning@localhost>."""
    if not shutil.which("git") or _git(["rev-parse", "--is-inside-work-tree"], run_dir).returncode != 0:
        return None
    paths = [str(f.resolve()) for f in files if f.exists()]
    if not paths or _git(["check-ignore", "-q", paths[0]], run_dir).returncode == 0:
        return None
    if _git(["add", "--", *paths], run_dir).returncode != 0:
        return None
    if _git(["diff", "--cached", "--quiet", "--", *paths], run_dir).returncode != 0:
        # --only: commit these paths and nothing else the person may have staged
        commit = [*_git_identity(run_dir), "commit", "-q", "-m", message, "--only", "--", *paths]
        if _git(commit, run_dir).returncode != 0:
            return None
    return _git(["rev-parse", "HEAD"], run_dir).stdout.strip() or None


def _clear_markers(run_dir: Path) -> None:
    """Before a resume: the last attempt's end markers would otherwise describe the new process."""
    run = Run(run_dir)
    for marker in (run.stop_request, run.stopped, run.outcome, run.exit_code, run.train_begin):
        marker.unlink(missing_ok=True)


def _what_runs(derived: DerivedState) -> str:
    """The live process or SLURM job of a run, in words."""
    job = derived.job_id
    return f"SLURM job {job}" if job else f"pid {derived.pid}"


def _history(previous: dict | None) -> list:
    """run.json's history: every earlier launch record, oldest first."""
    return ((previous or {}).get("history", []) + [{k: v for k, v in previous.items() if k != "history"}]
            if previous else [])


def _submit(run: Run, plan: LaunchPlan, written: dict, commit: str | None, resumed_from: str | None,
            patch: dict | None = None) -> LaunchResult:
    """The SLURM launcher's start: sbatch the written script and record the job in run.json."""
    config_sha, script_sha = sha256_file(run.config), sha256_file(run.script)
    record = submit_job(run, plan.slurm_layout, plan.node_plan, {
        "command": plan.train_command, "python": training_python(), "config_sha256": config_sha,
        "train_script_sha256": script_sha, "reward_code_sha256": verdict_reward_sha256(run), "git_commit": commit,
        "strategy": plan.strategy, "num_processes": plan.num_processes, "num_nodes": plan.num_nodes,
        "accelerate_config": written.get("accelerate_config"), "vllm_server": plan.vllm,
        "resumed_from": resumed_from, "resume_patch": patch, "history": _history(read_run_json(run))})
    return LaunchResult(
        launched=True, run_dir=str(run.dir), state="pending", command=plan.train_command, config_sha256=config_sha,
        train_script_sha256=script_sha, git_commit=commit, log_path=str(run.stdout),
        accelerate_config=written.get("accelerate_config"), vllm_server=plan.vllm, slurm_script=written["slurm"],
        job_id=record["job_id"], resumed_from=resumed_from,
        message=f"{'resumed' if resumed_from else 'started'} {run.dir.name}: {describe_job(record)}")


def _start(run_dir: Path, plan: LaunchPlan, written: dict, resumed_from: str | None, env_report: dict,
           patch: dict | None = None) -> LaunchResult:
    """Record the recipe, start train/launch.sh detached, write run.json."""
    run = Run(run_dir)
    config_path, script_path = run.config, run.script
    config_sha, script_sha = sha256_file(config_path), sha256_file(script_path)
    recorded = [config_path, script_path, run.rewards, run.request, run.launch_script, run.accelerate]
    commit = record_in_git(run_dir, recorded, f"llm-finetuning: {'resume' if resumed_from else 'launch'} "
                                              f"{run_dir.name} (config {config_sha[:12]})")

    previous = read_run_json(run)
    run.logs.mkdir(parents=True, exist_ok=True)
    started_ts = time.time()
    log_path = run.stdout
    with open(log_path, "ab") as log:
        stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        log.write(
            f"==== llm-finetuning {'resume from ' + resumed_from if resumed_from else 'launch'} at {stamp}\n".encode()
        )
        log.flush()
        # train.py imports this package: from the plugin folder when the training Python lacks it.
        env = {**training_env(training_python()), "PYTHONUNBUFFERED": "1"}
        # What the verdict reviewed: the training process refuses to train other reward code (inspection.trained).
        reward_sha = verdict_reward_sha256(run)
        env.pop(REWARD_SHA_ENV, None)
        env.update({REWARD_SHA_ENV: reward_sha} if reward_sha else {})
        proc = subprocess.Popen(
            LAUNCHER, cwd=run_dir, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env=env,
        )
    # Until bash has exec'd, the child still shows this Python's command line: wait, so the identity every
    # later check verifies (pid, start time, `bash train/launch.sh`, this directory) is already true.
    deadline = time.time() + 5
    while verified_launcher(run, proc.pid) is None and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    try:
        create_time = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        create_time = None
    record = {
        "state": "starting",
        "pid": proc.pid,
        "pgid": proc.pid,  # new session: the launcher leads its own process group
        "create_time": create_time,
        "command": plan.train_command,
        "launcher": LAUNCHER,
        "cwd": str(run_dir),
        "python": training_python(),
        "started_at": _dt.datetime.fromtimestamp(started_ts, _dt.timezone.utc).isoformat(timespec="seconds"),
        "started_ts": started_ts,
        "config_sha256": config_sha,
        "train_script_sha256": script_sha,
        "reward_code_sha256": reward_sha,
        "git_commit": commit,
        "strategy": plan.strategy,
        "num_processes": plan.num_processes,
        "accelerate_config": written.get("accelerate_config"),
        "vllm_server": plan.vllm,
        "resumed_from": resumed_from,
        "resume_patch": patch,
        "env_verdict": env_report.get("verdict"),
        "history": _history(previous),
    }
    write_run_json(run, record)
    return LaunchResult(
        launched=True, run_dir=str(run_dir), state="starting", pid=proc.pid, command=plan.train_command,
        config_sha256=config_sha, train_script_sha256=script_sha, git_commit=commit, log_path=str(log_path),
        accelerate_config=written.get("accelerate_config"), vllm_server=plan.vllm, resumed_from=resumed_from,
        message=f"{'resumed' if resumed_from else 'started'} {run_dir.name} (pid {proc.pid}, {plan.strategy}, "
        f"{plan.num_processes} process{'es' if plan.num_processes > 1 else ''}); follow it with training_status",
    )


# ---------------------------------------------------------------- the tools
def _refused(run_dir: Path, refusals: list[GateRefusal], state: str) -> LaunchResult:
    return LaunchResult(
        launched=False, run_dir=str(run_dir), refusals=refusals, state=state,
        message="refused by " + ", ".join(r.gate for r in refusals) + " gate(s): " + " | ".join(
            f"{r.gate}: {r.how_to_clear}" for r in refusals),
    )


def launch_training(request: LaunchRequest) -> LaunchResult:
    """Start a run after its gates pass: config valid, inspection verdict current, environment not blocked.
    One caller at a time per run (runlock); a run launched before is refused unless archive_previous."""
    run = resolve_run(request.run)
    try:
        with run_lock(run, "launch"):
            return _launch(run, request)
    except RunLocked as exc:
        return _locked(run.dir, exc)


def _locked(run_dir: Path, exc: RunLocked) -> LaunchResult:
    return _refused(run_dir, [GateRefusal(
        gate="lock", message=str(exc),
        how_to_clear=f"wait for that call (pid {exc.holder.get('pid', 'unknown')}) to finish, then training_status; "
        "a second launch of one run is never started")], derive_state(exc.run).state)


def _foreign_output_dir(run: Run, config: dict) -> GateRefusal | None:
    """An absolute output_dir inside another run directory (a run copied with an old absolute path): training
    would write into that run."""
    out = run.output_dir(config).resolve()
    here, root = run.dir.resolve(), runs_root().resolve()
    if out.is_relative_to(root) and not out.is_relative_to(here):
        return GateRefusal(
            gate="config", message=f"output_dir {out} lies in another run directory, not in {run.dir.name}: "
            "training would write into that run", how_to_clear="set output_dir: checkpoints in train/config.yaml "
            "(relative paths are relative to the run directory)")
    return None


def _launch(run: Run, request: LaunchRequest) -> LaunchResult:
    run_dir = run.dir
    derived = derive_state(run)
    if derived.alive:
        return _refused(run_dir, [GateRefusal(
            gate="state", message=f"{run_dir.name} is already {derived.state} ({_what_runs(derived)})",
            how_to_clear="wait for it, or stop_training first")], derived.state)
    _, config = read_run_target(run)
    launched = run.launched_evidence()
    if launched and not request.archive_previous:
        done = checkpoints(run, config)
        return _refused(run_dir, [GateRefusal(
            gate="state", message=f"{run_dir.name} was launched before (state {derived.state}; it holds "
            f"{', '.join(launched)}): a fresh launch would train over it"
            + (f" (latest checkpoint {done[-1].name})" if done else ""),
            how_to_clear=("resume_training to continue from the latest checkpoint, " if done else "")
            + "emit_grpo_config (without run_dir) for a new run, or launch again with archive_previous "
            "(CLI: --archive-previous) to move this attempt to archive/ first")], derived.state)
    foreign = _foreign_output_dir(run, config)
    if foreign:
        return _refused(run_dir, [foreign], derived.state)

    plan = build_launch_plan(run_dir, request)  # bad launch options are input errors, before any gate
    if plan.slurm and request.submit:
        preflight(plan.slurm)  # the scheduler is there and would take the job: else one line, nothing written
    refusals, env = check_gates(run_dir, environment=not plan.slurm)
    refusals += memory_refusals(plan)
    if refusals:
        return _refused(run_dir, refusals, derived.state)
    if launched:  # archive_previous: the earlier attempt moves aside before anything new is written
        _archive_attempt(run, config)
    if plan.slurm:
        written = write_plan_files(run_dir, plan)
        commit = record_in_git(run_dir, [run.config, run.script, run.slurm_script, run.accelerate],
                               f"llm-finetuning: SLURM script for {run_dir.name}")
        if request.submit:
            return _submit(run, plan, written, commit, None)
        return LaunchResult(
            launched=False, run_dir=str(run_dir), state=derived.state, command=plan.train_command,
            config_sha256=sha256_file(run.config),
            train_script_sha256=sha256_file(run.script), git_commit=commit,
            accelerate_config=written.get("accelerate_config"), slurm_script=written["slurm"], vllm_server=plan.vllm,
            message=f"{plan.num_nodes} node(s): wrote {written['slurm']} (not submitted); submit it with `sbatch "
                    "train/launch.slurm` from the run directory",
        )
    written = write_plan_files(run_dir, plan)
    return _start(run_dir, plan, written, None, env)


def _archive_attempt(run: Run, config: dict) -> Path:
    """Move what a launch left (record, logs, checkpoints, promotion, export, plot) to archive/attempt-<n>/."""
    slot = run.archive_slot("attempt")
    out = run.output_dir(config)
    movable = [run.run_json, run.logs, *sorted(run.train.glob("logs-attempt-*")), run.promotion,
               run.promotion_report, run.export, run.progress_plot]
    if out.resolve().is_relative_to(run.dir.resolve()):
        movable.append(out)
    for path in movable:
        if path.exists():
            target = slot / path.relative_to(run.dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)
    return slot


def resume_training(request: RunRequest | LaunchRequest) -> LaunchResult:
    """Continue from the latest checkpoint with the same config (same sha256 as at launch), or refuse.
    One caller at a time per run (runlock)."""
    run = resolve_run(request.run)
    try:
        with run_lock(run, "resume"):
            return _resume(run, request)
    except RunLocked as exc:
        return _locked(run.dir, exc)


def _resume(run: Run, request: RunRequest | LaunchRequest) -> LaunchResult:
    run_dir = run.dir
    derived = derive_state(run)
    # A copied run continues from its own checkpoints under the launch record it was copied with.
    record = derived.record or derived.copied_record
    if isinstance(request, LaunchRequest):
        launch = request
    else:  # same layout as the launch it continues
        previous = record or {}
        sub = previous.get("slurm") if isinstance(previous.get("slurm"), dict) else {}
        launch = LaunchRequest(run=request.run, num_processes=previous.get("num_processes"),
                               strategy=previous.get("strategy") or "auto", num_nodes=sub.get("nodes") or 1,
                               launcher="slurm" if previous.get("backend") == "slurm" else "local",
                               partition=sub.get("partition"), account=sub.get("account"),
                               time_limit=sub.get("time_limit"), requeue=sub.get("requeue", True))
        if previous.get("backend") == "slurm" and (previous.get("num_processes") or 0) > 1:
            launch.num_processes = max(previous["num_processes"] // max(sub.get("nodes") or 1, 1), 1)
    if derived.alive:
        return _refused(
            run_dir,
            [
                GateRefusal(
                    gate="state",
                    message=f"{run_dir.name} is still {derived.state} ({_what_runs(derived)})",
                    how_to_clear="nothing to resume while it runs; stop_training first if you meant to restart it",
                )
            ],
            derived.state,
        )
    if record is None:
        if derived.note:  # launched once, but its record is gone: say what is known
            return _refused(run_dir, [GateRefusal(
                gate="state", message=f"{run_dir.name}: {derived.note} Without the launch record the launched "
                "config cannot be checked, so it is not resumed",
                how_to_clear="restore run.json (from git or a backup), or launch_training with archive_previous to "
                "start over")], derived.state)
        return _refused(run_dir, [GateRefusal(
            gate="state", message=f"{run_dir.name} was never launched, so there is nothing to resume",
            how_to_clear="launch_training starts it")], derived.state)
    refusals = []
    config_path = run.config
    if config_path.exists() and sha256_file(config_path) != record.get("config_sha256"):
        commit = record.get("git_commit")
        refusals.append(GateRefusal(
            gate="config_hash",
            message=f"train/config.yaml changed since the run started (sha256 {sha256_file(config_path)[:12]} vs "
            f"{str(record.get('config_sha256'))[:12]} at launch); the checkpoints belong to the old config",
            how_to_clear=(f"restore the launched config (git show {commit}:<run>/train/config.yaml) " if commit else
                          "restore the launched config ")
            + "to resume, or emit a new run directory to train with the new one"))
    _, config = read_run_target(run)
    foreign = _foreign_output_dir(run, config)
    if foreign:
        refusals.append(foreign)
    done = checkpoints(run, config)
    patch = getattr(request, "patch", None)
    latest_path, why = last_good_checkpoint(run, done) if patch else (done[-1] if done else None, None)
    if latest_path is None:
        refusals.append(GateRefusal(
            gate="checkpoint", message=f"no checkpoint under {config.get('output_dir', 'checkpoints')} to resume from"
            + (f" ({why}, and none was saved before it)" if why else ""),
            how_to_clear="launch_training with archive_previous starts it from the beginning (with the patch merged "
                         "into train/config.yaml); set save_steps so a later stop leaves a checkpoint"))
    if refusals:
        return _refused(run_dir, refusals, derived.state)
    undo = None
    if patch:  # the way on after a guard stop: the root cause's patch, validated, the gate's pins moved for it
        refusals, undo = apply_patch(run, config, patch)
        if refusals:
            return _refused(run_dir, refusals, derived.state)

    latest = str(latest_path)
    plan = build_launch_plan(run_dir, launch, extra_args=["--resume_from_checkpoint", latest])
    if plan.slurm:
        try:
            preflight(plan.slurm)
        except UserInputError:
            if undo:
                undo()  # the patched config goes back: nothing half-done stays
            raise
    gate_refusals, env = check_gates(run_dir, environment=not plan.slurm)
    gate_refusals += memory_refusals(plan)
    if gate_refusals:
        if undo:
            undo()
        return _refused(run_dir, gate_refusals, derived.state)
    _clear_markers(run_dir)
    written = write_plan_files(run_dir, plan)
    if plan.slurm:
        commit = record_in_git(run_dir, [run.config, run.script, run.slurm_script, run.accelerate],
                               f"llm-finetuning: resume {run_dir.name} on SLURM")
        return _submit(run, plan, written, commit, latest, patch=patch)
    return _start(run_dir, plan, written, latest, env, patch=patch)

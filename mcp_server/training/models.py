"""Requests and results of the training tools. Light (pydantic only): the MCP door imports it at start-up.

Every field has a description: it becomes the MCP tool schema an agent reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from mcp_server.inputs import Name, PathText, Request
from mcp_server.inspection.models import DifficultyFilter, DifficultyFilterResult

Verdict = Literal["ready", "ready-with-warnings", "blocked"]
# pending, cancelled, timed_out, preempted: a SLURM job's states (training/launchers/slurm/job.py).
# stopping: alive with a stop request standing (it saves and stops at its step end).
RunState = Literal["not_launched", "pending", "starting", "running", "stopping", "succeeded", "failed", "stopped",
                   "cancelled", "timed_out", "preempted", "unknown"]
# list_runs only: a run whose files cannot be read (the summary's `error` says which and why).
ListedState = Literal["not_launched", "pending", "starting", "running", "stopping", "succeeded", "failed", "stopped",
                      "cancelled", "timed_out", "preempted", "unknown", "unreadable"]
Launcher = Literal["auto", "local", "slurm"]
# A partition, account or time limit goes into an #SBATCH line: one word of these characters.
SlurmWord = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:,+-]{1,128}$")]
Strategy = Literal["auto", "single", "ddp", "zero2", "zero3", "fsdp"]


# ---------------------------------------------------------------- environment
class PrepareRequest(Request):
    path: PathText | None = Field(
        default=None,
        description="Where to build the training environment: a new or empty folder, or one this tool built; "
        "any other (your own venv too) is refused. Default: <user data dir>/llm-finetuning/training-venv.",
    )
    torch_spec: Name | None = Field(
        default=None,
        description="The torch requirement. Default: without an NVIDIA GPU the CPU build (TORCH_CPU_SPEC, else "
        "torch==2.13.0), with one the regular build (TORCH_GPU_SPEC, else torch>=2.4).",
    )
    torch_index: PathText | None = Field(
        default=None,
        description="Extra package index for torch, e.g. https://download.pytorch.org/whl/cpu (default: "
        "TORCH_CPU_INDEX without a GPU, none with one).",
    )
    restart: bool = Field(
        default=False, description="Build again even when a build is ready or has failed (never while one runs)."
    )


class PrepareResult(BaseModel):
    status: Literal["running", "ready", "failed"] = Field(
        description="running: building in the background (call again for its status); ready: the server now "
        "trains with it; failed: see log_tail, fix, and call again with restart=true."
    )
    venv: str = Field(description="The environment's directory.")
    python: str = Field(description="Its Python: the training interpreter once ready.")
    log_path: str = Field(description="The build's log: watch it (tail -f) while it runs.")
    log_tail: list[str] = Field(default_factory=list, description="The log's last lines.")
    started_at: str | None = None
    finished_at: str | None = None
    in_use: bool = Field(
        default=False,
        description="The server trains with this environment now (LLM_FINETUNING_PYTHON, when set, wins).",
    )
    message: str


class EnvironmentRequest(Request):
    run: PathText | None = Field(
        default=None,
        description="Run directory (or its name under runs/). The report is checked against the run's target "
        "(train/request.json, train/config.yaml) and written to <run>/env-report.json; without a run it is "
        "written to the workspace root.",
    )


class GPUInfo(BaseModel):
    index: int = Field(description="CUDA device index.")
    name: str = Field(description="Device name as the driver reports it.")
    memory_gib: float = Field(description="Total device memory in GiB.")
    compute_capability: str = Field(description="CUDA compute capability, e.g. '9.0'.")
    bf16: bool = Field(description="Whether the device supports bfloat16 (compute capability 8.0 or newer).")


class EnvironmentReport(BaseModel):
    verdict: Verdict = Field(description="ready, ready-with-warnings or blocked.")
    reasons: list[str] = Field(
        default_factory=list, description="Why the verdict is not plain 'ready': blockers first, then warnings."
    )
    blockers: list[str] = Field(default_factory=list, description="What prevents training here, each with its fix.")
    warnings: list[str] = Field(default_factory=list, description="What allows training but limits it.")
    allows: str = Field(description="What this machine can run, in one sentence.")
    python: str = Field(description="The training interpreter probed (LLM_FINETUNING_PYTHON, else the server's).")
    platform: str = Field(description="Operating system and machine.")
    gpus: list[GPUInfo] = Field(default_factory=list, description="Visible CUDA GPUs; empty on a CPU machine.")
    cuda_version: str | None = Field(
        default=None, description="CUDA version torch was built with, when CUDA is usable."
    )
    driver_version: str | None = Field(default=None, description="NVIDIA driver version (nvidia-smi), when present.")
    cpu_count: int | None = Field(default=None, description="Logical CPU cores.")
    ram_gib: float | None = Field(default=None, description="Total system memory in GiB.")
    ram_available_gib: float | None = Field(default=None, description="Available system memory in GiB.")
    free_disk_gib: float | None = Field(default=None, description="Free disk space where the run writes, in GiB.")
    packages: dict[str, str | None] = Field(
        default_factory=dict,
        description="Installed versions of torch, trl, transformers, peft, accelerate, datasets, deepspeed, vllm "
        "in the training interpreter; null when absent.",
    )
    vllm_window: list[str] | None = Field(
        default=None,
        description="[lowest, highest] vLLM version the training interpreter's TRL supports, read from its "
        "trl/import_utils.py; a vLLM outside it is flagged (a blocker when the run's config uses vLLM).",
    )
    vllm_transformers: str | None = Field(
        default=None,
        description="The transformers versions the installed vLLM asks for (its metadata, e.g. '<5.18.0,>=5.10.4'); "
        "a transformers outside it is flagged (a blocker when the run's config uses vLLM).",
    )
    broken_libraries: dict[str, str] = Field(
        default_factory=dict,
        description="torchvision, torchaudio or torchcodec installed but failing to import on this torch (a build "
        "for another torch), with the error: transformers imports them, so each is a blocker.",
    )
    target: str | None = Field(default=None, description="The run's target hardware, e.g. '8x H100' or 'cpu'.")
    report_path: str = Field(description="Where env-report.json was written.")
    checked_at: str = Field(description="UTC time of the check (ISO 8601).")


# ---------------------------------------------------------------- launch / resume / stop
class GateRefusal(BaseModel):
    gate: Literal["config", "inspection", "environment", "state", "checkpoint", "config_hash", "memory", "lock",
                  "logs", "refilter"] = (
        Field(description="The gate that refused.")
    )
    message: str = Field(description="Why the gate refused.")
    how_to_clear: str = Field(description="What to do so the gate passes.")


class LaunchRequest(Request):
    run: PathText = Field(description="Run directory (or its name under runs/) written by emit_grpo_config.")
    strategy: Strategy = Field(
        default="auto",
        description="Multi-GPU strategy, used with more than one process: ddp (plain data parallel), zero2, "
        "zero3 (DeepSpeed via TRL's bundled accelerate configs) or fsdp (FSDP2). auto: the memory plan's choice, "
        "the least sharding that fits (ddp for LoRA/QLoRA, zero2 for a full fine-tune, zero3 when that does not "
        "fit). single forces one process.",
    )
    num_processes: int | None = Field(
        default=None,
        ge=1,
        description="Training processes on this node. Default: the run's num_gpus (train/request.json) minus "
        "the GPUs given to a vLLM server; 1 for a CPU target.",
    )
    vllm_server_gpus: int | None = Field(
        default=None,
        ge=0,
        description="GPUs for the `trl vllm-serve` process when the config uses vllm_mode=server (default 1). "
        "It is started first on its own GPUs and waited for (health check) before training starts.",
    )
    num_nodes: int = Field(
        default=1, ge=1, description="Nodes. More than one: a SLURM job (train/launch.slurm, submitted with sbatch)."
    )
    launcher: Launcher = Field(
        default="auto",
        description="local: a detached process on this machine; slurm: a job submitted with sbatch (checked with "
        "`sbatch --test-only` first; the job id goes to run.json); auto: slurm for more than one node, else local.",
    )
    partition: SlurmWord | None = Field(default=None, description="SLURM partition (default: the cluster's default).")
    account: SlurmWord | None = Field(default=None, description="SLURM account to charge (default: yours).")
    time_limit: SlurmWord | None = Field(
        default=None, description="SLURM time limit (e.g. 2:00:00 or 1-00:00:00); USR1 is sent 120 s before it so "
        "the run saves a checkpoint, and a requeued job resumes from it.")
    requeue: bool = Field(
        default=True, description="SLURM: --requeue, so a job preempted or hit by a node failure is requeued and "
        "resumes from its latest checkpoint by itself. false: such a job ends as failed (resume_training continues "
        "it).")
    submit: bool = Field(
        default=True, description="SLURM: submit the job. false: only write train/launch.slurm (for a cluster this "
        "machine cannot reach).",
    )
    archive_previous: bool = Field(
        default=False,
        description="Launch afresh a run that was launched before: its launch record, logs, checkpoints, promotion "
        "and export move to <run>/archive/attempt-<n>/ first (nothing is deleted). Without it such a launch is "
        "refused (resume_training continues a run; emit_grpo_config makes a new one).",
    )


class LaunchResult(BaseModel):
    launched: bool = Field(description="True when a training process was started here or a SLURM job submitted "
                           "(False for a SLURM script written with submit=false).")
    run_dir: str = Field(description="The run directory.")
    refusals: list[GateRefusal] = Field(
        default_factory=list, description="Gates that refused, each with how to clear it (empty when launched)."
    )
    state: str = Field(description="The run's state after this call.")
    pid: int | None = Field(default=None, description="Process id of the detached training process (its session "
                                                      "leader).")
    command: list[str] = Field(default_factory=list, description="The training command as run (argv).")
    config_sha256: str | None = Field(default=None, description="sha256 of train/config.yaml as launched.")
    train_script_sha256: str | None = Field(default=None, description="sha256 of train/train.py as launched.")
    git_commit: str | None = Field(
        default=None, description="Commit recording train/config.yaml and train/train.py when the workspace is a git "
                                  "repo."
    )
    log_path: str | None = Field(default=None, description="train/logs/stdout.log (stdout and stderr of training).")
    accelerate_config: str | None = Field(default=None, description="The accelerate config written for multi-process "
                                                                    "runs.")
    vllm_server: dict[str, Any] | None = Field(
        default=None, description="The vLLM server started for server mode: pid, url, gpus, log."
    )
    slurm_script: str | None = Field(default=None, description="The SLURM script written for multi-node runs.")
    job_id: str | None = Field(default=None, description="The SLURM job id, when submitted.")
    resumed_from: str | None = Field(default=None, description="The checkpoint a resumed run starts from.")
    skipped_checkpoints: list[str] = Field(
        default_factory=list, description="resume_training: each checkpoint-N after the latest complete one that "
        "is no complete checkpoint (a save cut short, a file added, removed or changed since), with why: passed "
        "over, never silently.")
    refilter: DifficultyFilterResult | None = Field(
        default=None, description="A resume with refilter: how many prompts its logged completions dropped, and why.")
    patched: dict[str, dict[str, Any]] | None = Field(
        default=None, description="A resume with a patch: each field it changed, {old, new} (old null when the "
        "launched config did not set it); the launched config is kept under archive/resume-patch-<n>/.")
    warnings: list[str] = Field(
        default_factory=list, description="What limits the run, said at the launch; it is launched all the same: "
        "the review's groups mostly scoring alike (no learning signal, with the causes its samples show), and what "
        "promote_checkpoint would find wrong with the base model's baseline (none yet, stale, other graders, goldens "
        "or budget), each with the command that measures it.")
    message: str = Field(default="", description="One-line summary for people.")


class RunRequest(Request):
    run: PathText = Field(description="Run directory (or its name under runs/).")
    patch: dict[str, Any] | None = Field(
        default=None,
        description="resume_training only: config changes to resume with (after a guard stop, the root-cause "
        "finding's patch from diagnose_run or train/logs/guard.json). Validated against the launched config; the "
        "inspection verdict's pins move for exactly what it changes (a field the verdict pins only to a value the "
        "stop's findings in guard.json propose: anything else is refused); after a guard stop the run resumes from the "
        "last checkpoint saved before the stop's step.",
    )
    refilter: DifficultyFilter | None = Field(
        default=None,
        description="resume_training only: re-filter the data by the completions the run logged "
        "(log_completions: true): prompts always or never solved are dropped; the rest, in a new "
        "data/refilter-<n>/kept.jsonl (record.json says why), is what trains and what the verdict records. Refused, "
        "writing nothing, when no completions were logged or every prompt would go.",
    )


class StatusRequest(Request):
    run: PathText = Field(description="Run directory (or its name under runs/).")
    plot: bool = Field(
        default=False,
        description="Also draw reward, reward_std, KL, entropy and completion length over steps into "
        "<run>/progress.png (returned as an image over MCP).",
    )
    log_lines: int = Field(default=20, ge=0, le=500, description="How many last lines of stdout.log to include.")


class StopRequest(Request):
    run: PathText = Field(description="Run directory (or its name under runs/).")
    timeout_s: float | None = Field(
        default=None,
        ge=0,
        le=86400,
        description="Seconds to wait for the run to reach its step end, save a checkpoint and exit. Default: the "
        "current step's expected end from the run's own logs (its step time) plus time for the save, at least "
        "120 s and at most 15 min. A run still in its step then is left stopping: it stops itself there, nothing "
        "is lost.",
    )
    kill: bool = Field(
        default=False,
        description="After timeout_s, kill the run (its process group; a SLURM job: scancel), losing the steps since "
        "its latest checkpoint: the result then carries an error (and the CLI exits 1).",
    )


class HealthFlag(BaseModel):
    code: str = Field(description="Stable snake_case code of the diagnosis rule.")
    severity: str = Field(description="error, warning or info.")
    explanation: str = Field(description="What the metrics show.")
    patch: dict[str, Any] | None = Field(default=None, description="Config change that addresses it, if any.")


class TrainingStatus(BaseModel):
    run_dir: str = Field(description="The run directory.")
    state: RunState = Field(
        description="not_launched, starting (process up, no step logged yet), running, stopping (a stop asked, "
        "the run finishing its step to save and exit), succeeded, failed "
        "(process gone without a success marker), stopped (stopped on request) or unknown (run.json lost, no "
        "live launcher, logs that do not say how it ended: see note); a SLURM job also pending (see job.reason), "
        "cancelled (scancel from outside), timed_out or preempted. Derived from the verified process (or the "
        "run's own job) and the files, so it survives a server restart and the loss of run.json."
    )
    note: str | None = Field(
        default=None, description="What was not as expected and so what is known: run.json lost or naming another "
        "process (state read from the live launcher), a copied run (a new run; the original's process is not its).",
    )
    pid: int | None = Field(default=None, description="Training process id, when launched.")
    alive: bool = Field(default=False, description="Whether the training process is running now.")
    exit_code: int | None = Field(default=None, description="Exit code of the training command, when it has ended and "
                                                            "it was recorded.")
    started_at: str | None = Field(default=None, description="UTC start time (ISO 8601).")
    elapsed_s: float | None = Field(default=None, description="Seconds since start (until the end when finished).")
    step: int | None = Field(default=None, description="Latest logged optimizer step.")
    max_steps: int | None = Field(default=None, description="Total steps of the run when known (max_steps in the "
                                                            "config or trainer_state).")
    steps_per_s: float | None = Field(default=None, description="Recent training speed from the progress log.")
    step_estimate_s: float | None = Field(default=None, description="Before the first step is logged (or the "
                                          "launch): the expected seconds per step (the planner's speed model; on a "
                                          "CPU, at the rates measured at emission and the load now: the figure "
                                          "emission and launch gave). After it, eta_s stands on the measured steps.")
    step_estimate: str | None = Field(default=None, description="That estimate and what it stands on.")
    eta_s: float | None = Field(default=None, description="Estimated seconds to finish, when running and max_steps is "
                                                          "known.")
    latest: dict[str, Any] = Field(default_factory=dict, description="The latest progress line (keys: "
                                                                     "docs/architecture.md, \"The run directory\").")
    checkpoints: list[str] = Field(default_factory=list, description="Checkpoint directories saved so far, oldest "
                                                                     "first.")
    stop_requested: bool = Field(default=False, description="Whether stop_training was asked for this run.")
    health: list[HealthFlag] = Field(
        default_factory=list, description="Health flags from the diagnosis rules (diagnose_run) on the metrics so far."
    )
    health_note: str | None = Field(default=None, description="Why health flags are missing, when they are.")
    live_findings: list[HealthFlag] = Field(
        default_factory=list,
        description="The live guard's findings (train/logs/guard.json): the hard-failure rules the progress callback "
        "ran on the latest logged steps.",
    )
    guard: str | None = Field(
        default=None, description="The run's guard mode (train/request.json): off, warn (record) or stop."
    )
    guard_stop: dict[str, Any] | None = Field(
        default=None,
        description="When the guard stopped the run: {code, step, save} (save: whether a checkpoint was written).",
    )
    log_tail: list[str] = Field(default_factory=list, description="Last lines of train/logs/stdout.log.")
    job: dict[str, Any] | None = Field(
        default=None, description="A SLURM run's job as the scheduler reports it: job_id, scheduler_state, reason "
        "(why pending), nodes, exit_code, failed_nodes, restarts, node_env (each node's env-<node>.json), "
        "plan_per_node (a GPU job: the memory plan's rows - role, gpus, peak_gib_per_gpu, capacity_gib, "
        "rollout_tokens_per_s - each with the node it landed on).")
    plot_path: str | None = Field(default=None, description="The PNG plot written, when asked for.")
    message: str = Field(default="", description="One-line summary for people.")


class StopResult(BaseModel):
    run_dir: str = Field(description="The run directory.")
    state: RunState = Field(description="The run's state after the stop.")
    graceful: bool = Field(description="True when the process exited on its own after saving a checkpoint: the "
                                       "trainer's signed stopped.json names a step whose checkpoint is complete.")
    killed: bool = Field(description="True when it was killed (kill after timeout_s): the steps since its latest "
                                     "checkpoint are lost.")
    checkpoint: str | None = Field(default=None, description="The latest checkpoint after the stop.")
    waited_s: float | None = Field(default=None, description="How long the stop waited for the run's step end.")
    step_time_s: float | None = Field(default=None, description="The run's step time as its logs show it (the "
                                                                "longest recent step), when logged.")
    error: str | None = Field(default=None, description="Set when the stop lost work (the run was killed, or its "
                                                        "checkpoint save at the stop failed): what was lost. A stop "
                                                        "that lost nothing has none.")
    message: str = Field(default="", description="One-line summary for people.")


class RunSummary(BaseModel):
    run: str = Field(description="Run directory name under runs/.")
    run_dir: str = Field(description="Absolute path.")
    state: ListedState = Field(description="State derived from the process and files; unreadable when a file of "
                               "the run cannot be read (see error).")
    error: str | None = Field(default=None, description="Why the run is unreadable: the file and what is wrong.")
    step: int | None = Field(default=None, description="Latest logged step.")
    max_steps: int | None = Field(default=None, description="Total steps when known.")
    model: str | None = Field(default=None, description="Model of the run (train/request.json).")
    started_at: str | None = Field(default=None, description="UTC start time of the latest launch.")


class RunList(BaseModel):
    runs_root: str = Field(description="The runs/ directory listed.")
    runs: list[RunSummary] = Field(default_factory=list, description="Every run, newest first.")
    notes: list[str] = Field(default_factory=list, description="Each entry of runs/ not listed, and why: a link "
                             "leading outside the workspace, to nothing, or to a run listed under its own name.")

"""The training package's tools: the environment (check and build), launch, status, stop, resume and
the run list, with their readable summaries."""

from __future__ import annotations

import time

from mcp_server.errors import one_line
from mcp_server.toolspec import READS, RUN, Command, Effects, Flag, ToolSpec, print_result
from mcp_server.training.models import (
    EnvironmentReport,
    EnvironmentRequest,
    LaunchRequest,
    LaunchResult,
    PrepareRequest,
    PrepareResult,
    RunList,
    RunRequest,
    StatusRequest,
    StopRequest,
    StopResult,
    TrainingStatus,
)
from mcp_server.reporting import Report, silent


# The core is imported on the first call, not with the registry: the doors start without the cores' imports.
def check_environment(request: EnvironmentRequest | None = None) -> EnvironmentReport:
    from mcp_server.training.environment import check_environment

    return check_environment(request)


def prepare_environment(request: PrepareRequest | None = None, report: Report = silent) -> PrepareResult:
    from mcp_server.training.prepare import prepare_environment

    return prepare_environment(request, report=report)


def launch_training(request: LaunchRequest, report: Report = silent) -> LaunchResult:
    from mcp_server.training.launch import launch_training

    return launch_training(request, report=report)


def resume_training(request: RunRequest | LaunchRequest, report: Report = silent) -> LaunchResult:
    from mcp_server.training.launch import resume_training

    return resume_training(request, report=report)


def training_status(request: StatusRequest) -> TrainingStatus:
    from mcp_server.training.status import training_status

    return training_status(request)


def stop_training(request: StopRequest, report: Report = silent) -> StopResult:
    from mcp_server.training.status import stop_training

    return stop_training(request, report=report)


def list_runs() -> RunList:
    from mcp_server.training.status import list_runs

    return list_runs()


def human_env(r: EnvironmentReport) -> str:
    lines = [f"{r.verdict.upper()}: {r.allows}", f"  python: {r.python}"]
    for g in r.gpus:
        lines.append(f"  GPU {g.index}: {g.name}, {g.memory_gib:.0f} GiB, cc {g.compute_capability}, bf16 "
                     f"{'yes' if g.bf16 else 'no'}")
    lines.append("  packages: " + ", ".join(f"{k} {v or '-'}" for k, v in r.packages.items()))
    lines.append(
        f"  RAM {r.ram_gib} GiB, free disk {r.free_disk_gib} GiB" + (f", target {r.target}" if r.target else "")
    )
    lines += [f"  BLOCKED  {b}" for b in r.blockers] + [f"  WARN     {w}" for w in r.warnings]
    lines.append(f"  report: {r.report_path}")
    return "\n".join(lines)


def human_prepare(r: PrepareResult) -> str:
    lines = [f"{r.status.upper()}: {r.message}", f"  python: {r.python}", f"  log:    {r.log_path}"]
    if r.status != "running" and r.log_tail:
        lines += ["  last lines of the log:"] + [f"    {line}" for line in r.log_tail]
    return "\n".join(lines)


def _add_wait(p) -> None:
    p.add_argument("--wait", action="store_true", help="Wait until the build is ready or has failed.")


def _prepare(args, request: PrepareRequest) -> int:
    result = prepare_environment(request)
    if args.wait and not args.json:
        print(human_prepare(result), flush=True)
    while args.wait and result.status == "running":
        time.sleep(5)
        result = prepare_environment(type(request)(path=request.path))
    print_result(result, args.json, human_prepare)
    return 1 if result.status == "failed" else 0


def human_launch(r: LaunchResult) -> str:
    lines = [r.message]
    for ref in r.refusals:
        lines += [f"  REFUSED by the {ref.gate} gate: {ref.message}", f"     to clear: {ref.how_to_clear}"]
    if r.launched:
        lines += [f"  command: {' '.join(r.command)}", f"  log:     {r.log_path}"]
    if r.slurm_script:
        lines.append(f"  SLURM script: {r.slurm_script}")
    lines += [f"  WARNING  {w}" for w in r.warnings]
    if r.refilter:
        f = r.refilter
        lines.append(f"  re-filtered: {f.rows_after} of {f.rows_before} prompts kept, {f.dropped} dropped (always "
                     f"{f.always_solved}, never {f.never_solved} solved in the logged completions): {f.data_file}")
    return "\n".join(lines)


def human_status(r: TrainingStatus) -> str:
    lines = [r.message]
    keys = ("reward", "reward_std", "kl", "entropy", "completion_mean_length", "clipped_ratio", "loss", "grad_norm")
    shown = [f"{k}={r.latest[k]:.4g}" for k in keys if isinstance(r.latest.get(k), (int, float))]
    if shown:
        lines.append("  latest: " + ", ".join(shown))
    if r.steps_per_s:
        lines.append(
            f"  speed: {r.steps_per_s:.3g} steps/s" + (f", ETA {r.eta_s / 60:.1f} min" if r.eta_s is not None else "")
        )
    for flag in r.health:
        lines.append(f"  {flag.severity.upper():8}{flag.code}: {flag.explanation}")
    if r.health_note:
        lines.append(f"  health: {r.health_note}")
    if r.state == "failed" and r.log_tail:
        lines += ["  log tail:"] + [f"    {line}" for line in r.log_tail[-10:]]
    if r.plot_path:
        lines.append(f"  plot: {r.plot_path}")
    return "\n".join(lines)


def human_runs(r: RunList) -> str:
    lines = [f"{one_line(x.run):40} {x.state:13} " + (x.error or "") if x.error else
             f"{one_line(x.run):40} {x.state:13} "
             f"step {x.step if x.step is not None else '-'}/{x.max_steps or '?'}  {x.model or ''}"
             for x in r.runs] or [f"no runs under {r.runs_root}"]
    return "\n".join(lines + [f"note: {one_line(note)}" for note in r.notes])


TOOLS = [
    ToolSpec(
        "check_environment", check_environment, EnvironmentReport, request=EnvironmentRequest,
        effects=Effects(writes=True, repeatable=True),
        description="""What can train here? GPUs (name, memory, compute capability, bf16), CUDA/driver, RAM, free disk, versions
    of torch/trl/transformers/peft/accelerate/vllm in the training interpreter, and a verdict ready |
    ready-with-warnings | blocked with reasons, judged against the run's target when a run is given.
    Writes env-report.json (in the run directory, else the workspace root).""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command("GPUs, CUDA, RAM, disk, package versions and a verdict; writes env-report.json.", human_env,
                    lambda r: r.verdict != "blocked", json_help="Print the report as JSON."),
    ),
    ToolSpec(
        "prepare_environment", prepare_environment, PrepareResult, request=PrepareRequest,
        effects=Effects(writes=True, repeatable=True, open_world=True),
        description="""Build a training environment (a venv with torch (the CPU build without an NVIDIA GPU), TRL, transformers
    and the rest) in the background, for when there is none to point LLM_FINETUNING_PYTHON at. Returns at once
    with the log to watch; call again for its status (running | ready | failed, with the log's tail). Once
    ready, the server samples, validates with TRL, trains and evaluates with it.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command("Build a training environment (torch, TRL, transformers) in the background; run again for its "
                    "status.", human_prepare, extra=_add_wait, handler=_prepare),
    ),
    ToolSpec(
        "launch_training", launch_training, LaunchResult, request=LaunchRequest,
        effects=Effects(writes=True, open_world=True),
        description="""Start a run's training as a detached process (it outlives this server) and return at once. Refuses,
    naming the gate and how to clear it, unless the config validates, the inspection verdict is current and
    passing, and the environment is not blocked. Records config.yaml/train.py (git commit when in a repo, sha256
    in run.json). Several GPUs: accelerate with TRL's ZeRO/FSDP configs (+ `trl vllm-serve` in server mode);
    several nodes: submits a SLURM job (checked with sbatch --test-only; the job id goes to run.json).""",  # noqa: E501 (the text MCP clients list)
        cli=Command("Start a run's training (detached) once its gates pass.", human_launch,
                    lambda r: bool(r.launched or r.slurm_script), flags={
                        "run": RUN,
                        "requeue": Flag("--no-requeue", "SLURM: a preempted or node-failed job is not requeued.",
                                        invert=True),
                        "submit": Flag("--no-submit", "SLURM: only write train/launch.slurm.", invert=True)}),
    ),
    ToolSpec(
        "training_status", training_status, TrainingStatus, request=StatusRequest, image="plot_path", effects=READS,
        description="""State of a run (starting | running | succeeded | failed | stopped; a SLURM job also pending | cancelled |
    timed_out | preempted, with the scheduler's reason and nodes), derived from its process (or job) and files,
    with the latest metrics, steps/s, ETA, health flags from the diagnosis rules, the log's last lines, and on
    request a PNG plot of reward, reward_std, KL, entropy and completion length (returned as an image).""",  # noqa: E501 (the text MCP clients list)
        cli=Command("State, latest metrics, speed, ETA and health of a run.", human_status,
                    json_help="Print the status as JSON.", flags={"run": RUN}),
    ),
    ToolSpec(
        "stop_training", stop_training, StopResult, request=StopRequest,
        effects=Effects(writes=True, destroys=True, repeatable=True),
        description="""Stop a run gracefully: it saves a checkpoint at its next step end and exits. Waits for that step (timeout_s,
    by default as long as the run's logs say a step takes); a run still in its step is left `stopping` and stops
    itself there. With kill, ends it after timeout_s (its process group; SLURM: scancel), an error naming what was lost.""",  # noqa: E501 (the text MCP clients list)
        cli=Command("Stop a run gracefully (checkpoint saved at its step end); --kill ends it after --timeout.",
                    lambda r: r.message, lambda r: not r.killed and r.error is None,
                    flags={"run": RUN, "timeout_s": Flag("--timeout")}),
    ),
    ToolSpec(
        "resume_training", resume_training, LaunchResult, request=RunRequest,
        effects=Effects(writes=True, destroys=True, open_world=True),
        description="""Continue a stopped or failed run from its latest checkpoint, with the same process layout. Refuses when
    train/config.yaml changed since launch (its sha256 in run.json), when there is no checkpoint, or when a gate
    (inspection, environment) is closed. With `patch` (the root-cause finding's patch after a guard stop) it
    validates the patched config, writes it, moves the inspection verdict's pins for exactly what it changes, and
    resumes from the last checkpoint before the guard's stop.""",  # noqa: E501 (the text MCP clients list)
        cli=Command("Continue a run from its latest checkpoint (same config hash, or --patch).", human_launch,
                    lambda r: r.launched, flags={"run": RUN}),
    ),
    ToolSpec(
        "list_runs", list_runs, RunList, effects=READS,
        description="""Every run under the workspace's runs/ with its state (derived from process and files), step and model.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command("Every run under runs/ with its state.", human_runs, json_help="Print the list as JSON."),
    ),
]

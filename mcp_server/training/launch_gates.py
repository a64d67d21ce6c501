"""The gates every launch and resume passes, whatever the launcher: the inspection verdict, a valid config, this
machine's environment (when the run trains here), the memory plan's fit, the run's state and its own output
directory. Each refusal names the gate, what is wrong and how to clear it; a call answers all of them at once."""

from __future__ import annotations

import os
import time

import psutil

from mcp_server.config.grpo_fields import GRPOView
from mcp_server.errors import UserInputError, one_line
from mcp_server.inspection.args_file import args_file_problem
from mcp_server.inspection.launched import way_on_for
from mcp_server.inspection.loader_env import LOADER_PART, inside_workspace, loader_change, loader_env_pin, loader_how
from mcp_server.inspection.pins import process_pins, python_change, python_how, training_python_pin
from mcp_server.inspection.training_inputs import missing_data
from mcp_server.memory.cpu_vllm import cpu_vllm_problem
from mcp_server.memory.verdict import validate
from mcp_server.recipe.runspec import RunSpec
from mcp_server.reporting import Report, silent, ticking
from mcp_server.runs import Run, output_outside, read_json_if_present
from mcp_server.training.derived import DerivedState
from mcp_server.training.environment import environment_report
from mcp_server.training.launchers import LaunchPlan
from mcp_server.training.trainer.vllm_cpu import VLLM_CPU_MEMORY_SHARE
from mcp_server.training.models import GateRefusal, LaunchResult
from mcp_server.training.runlock import LockNotOurs, RunLocked, cancel_requested
from mcp_server.training.runstate import derive_state
from mcp_server.training.trainer.written import written_paths, written_problems
from mcp_server.worker import apart
from mcp_server.worker_targets import CHECK_GATE
from mcp_server.workspace import WORKSPACE_FOLDERS, runs_root, workspace_folder


GATE_TICK_S = 10.0  # while a launch gate runs: a line this often, with its seconds so far


def check_gates(run: Run, spec: RunSpec, environment: bool = True,
                report: Report = silent) -> tuple[list[GateRefusal], dict]:
    """Every gate's answer (all of them, so one call tells everything to fix; the config gate's one-step rehearsal,
    which trains, only once the link, data and inspection gates pass: a launch they refuse starts nothing, and the
    config's rules still run); the env report too. `spec`: the run
    as the launch read it, its target with the launch's server GPUs (so the config is validated on the world the
    launch trains on). `environment=False` for a run that trains elsewhere (a SLURM job): this machine's
    environment is no gate. `report`: one line per gate as it starts (issue 49: a minute of silence)."""
    gate_of = ["gates", time.monotonic()]  # the gate under way and when it began: what the lines below say

    def began(line: str) -> None:
        gate_of[:] = [line.split(":", 1)[0], time.monotonic()]
        report(0, None, line)

    def still(_: float) -> str:  # walk 12: a gate's minute on a busy machine said nothing after its first line
        return f"{gate_of[0]}: still checking, {time.monotonic() - gate_of[1]:.0f} s in this gate so far"

    with ticking(report, GATE_TICK_S, still):
        return _gates(run, spec, environment, began)


def _gates(run: Run, spec: RunSpec, environment: bool, report) -> tuple[list[GateRefusal], dict]:
    report("gates: the logs folder and the inspection verdict")
    refusals: list[GateRefusal] = link_refusals(run, spec.values) + workspace_refusals()
    if missing := missing_data(run, spec.values):  # before the verdict's "content changed" (issue 49)
        refusals.append(GateRefusal(gate="config", message=str(missing), how_to_clear="put the data file back where "
                                    "train/config.yaml names it, or emit a new run on its new place"))
    # It imports the reward modules: out of a process that holds a protocol's descriptors (issue 48, M7), judging
    # this launch's read of the files and this process's interpreter and loader variables.
    gate = apart(CHECK_GATE, run, spec, here=process_pins(run))
    if not gate.passed:
        refusals.append(GateRefusal(gate="inspection", message=gate.reason, how_to_clear=gate.how_to_clear))
    # The rehearsal trains a step (seconds to minutes): only once the cheaper gates above pass, since a launch they
    # refuse starts nothing anyway; the config's rules still run, so one call names every config fix.
    rehearse = not refusals
    report("config: validating it, one training step rehearsed on a miniature of the model" if rehearse
           else "config: validating it (the one-step rehearsal runs once the gates above pass)")
    refusals += _config_refusals(run, spec, rehearse)
    if not environment:
        return refusals, {}
    refusals += cpu_vllm_refusals(spec)
    report("environment: probing the training interpreter (packages, devices, memory)")
    env = environment_report(run, spec)
    if env.verdict == "blocked":
        refusals.append(GateRefusal(
            gate="environment", message="this machine cannot run it: " + "; ".join(env.blockers),
            how_to_clear=f"fix what {env.report_path} lists as blocking (or launch on the target machine), "
            "then check_environment until it is not blocked"))
    return refusals, env.model_dump(mode="json")


def interpreter_refusals(run: Run) -> list[GateRefusal]:
    """The training interpreter, judged before anything is started with it (the config gate rehearses in it, the
    environment gate probes it, the launcher runs it): refused when it is not the one the verdict was recorded
    under, by path, resolved file or content (issue 48: a wrapper script named by LLM_FINETUNING_PYTHON after the
    verdict ran before the trainer's own checks refused). A run with no verdict pins has nothing to compare: the
    inspection gate refuses it."""
    verdict = read_json_if_present(run.verdict)
    pins = verdict.get("pins") if isinstance(verdict, dict) else None
    if not isinstance(pins, dict):
        return args_file_refusals(run)
    refusals = args_file_refusals(run) + loader_refusals(run, pins)
    recorded, current = pins.get("training_python"), training_python_pin()
    if recorded == current:
        return refusals
    return refusals + [GateRefusal(
        gate="inspection", message=python_change(recorded, current) + ": nothing was started with it",
        how_to_clear=way_on_for(run, python_how(recorded)))]


def args_file_refusals(run: Run) -> list[GateRefusal]:
    """An args file beside the training script (inspection.args_file): refused before anything starts, as the
    inspection gate refuses it."""
    problem = args_file_problem(run)
    return [] if problem is None else [GateRefusal(gate="config", message=problem[0], how_to_clear=problem[1])]


def loader_refusals(run: Run, pins: dict) -> list[GateRefusal]:
    """The dynamic loader's environment, judged before anything runs the training interpreter (issue 48: a
    LD_LIBRARY_PATH in the launching shell put a stand-in libpython first, whose constructor re-added a shadow folder
    to PYTHONPATH after launch.sh cleared PYTHON*): a folder or library inside the workspace (or the run directory,
    where an empty or relative entry points) is refused whatever the verdict recorded; any other value that is not
    the one the verdict was recorded under is refused naming the variable, what was reviewed and what it is now."""
    inside = inside_workspace(os.environ, str(runs_root().parent), str(run.dir))
    if inside:
        return [GateRefusal(
            gate="inspection", message=f"the dynamic loader would load code from inside the workspace before the "
            f"trainer's checks ({'; '.join(inside)}): nothing was started with it",
            how_to_clear="remove those entries from the launching shell's loader variables (the workspace is what a "
            "reviewer cannot vouch for: it is never trusted as a library folder), then launch again")]
    recorded, current = pins.get("loader_env"), loader_env_pin(cwd=str(run.dir))
    if recorded == current:
        return []
    said = loader_change(recorded, current) if isinstance(recorded, dict) else [
        "the verdict was recorded before the loader's variables were pinned"]
    return [GateRefusal(gate="inspection", message=f"{LOADER_PART} is not the one the verdict was recorded under: "
                        + "; ".join(said) + ": nothing was started with it",
                        how_to_clear=way_on_for(run, loader_how()))]


def workspace_refusals() -> list[GateRefusal]:
    """A workspace folder a launch writes (workspace.WORKSPACE_FOLDERS: run.json records eval/'s baselines) that
    is a link leading outside the workspace, refused before anything starts (issue 48, round 10 D1)."""
    refusals = []
    for name in WORKSPACE_FOLDERS:
        try:
            workspace_folder(name)
        except UserInputError as exc:
            refusals.append(GateRefusal(gate="logs", message=str(exc), how_to_clear="replace the link with a "
                                        f"folder of the workspace ({name}/), then launch or resume again"))
    return refusals


def link_refusals(run: Run, config: dict | None = None) -> list[GateRefusal]:
    """Symbolic links where the run writes (written.WRITTEN, the one list of them: train/, its logs, cache/,
    trackers/, the output_dir, archive/, and every entry at any depth of those written in place): the logs, the
    exit code, the progress, the datasets' arrow copy, the trackers' stores and the checkpoints would be written
    through them, into whatever file they point at (planted in a stopped run, or unpacked with it); then a second
    name of a file there, a pipe or a device (written.shared). Refused, never followed: the writers open without
    following links as well. `config`: the run's, read here when not given."""
    targets = written_paths(run, config)
    links, shared = written_problems(run, targets)
    if not links and not shared:
        return []
    where = ", ".join(f"{path.relative_to(run.dir)}/" for target, path in targets if target.entries)
    if shared:  # a hard link is no symbolic link: O_NOFOLLOW does not stop a write through it (issue 48 round 9)
        return [GateRefusal(
            gate="logs", message=f"{run.name} has files where training appends or writes in place ({where}) which "
            f"are not its own files ({', '.join(shared[:5])}"
            + (f", and {len(shared) - 5} more" if len(shared) > 5 else "") + "): training would write through them",
            how_to_clear="remove them (or move them out of the run's folders: they are not the run's files; the run "
                         "writes its own), then launch or resume again")]
    named = ", ".join(f"{one_line(str(p.relative_to(run.dir)))} -> {one_line(os.readlink(p))}" for p in links[:5])
    return [GateRefusal(
        gate="logs", message=f"{run.name} has symbolic links where training writes its logs, cache, trackers, "
        f"checkpoints or archive ({named}" + (f", and {len(links) - 5} more" if len(links) > 5 else "")
        + "): training would write through them", how_to_clear="remove the links (they are not the run's files: "
        "launch_training writes real ones; a cache elsewhere is HF_HOME or HF_DATASETS_CACHE in the launching "
        "environment), then launch or resume again")]


def _config_refusals(run: Run, spec: RunSpec, rehearse: bool = True) -> list[GateRefusal]:
    if not run.config.exists() or not run.script.exists():
        return [GateRefusal(
            gate="config", message=f"{run.name} has no train/config.yaml and train/train.py",
            how_to_clear="emit the run with emit_grpo_config (CLI: llm-finetuning emit-config)")]
    # The one validation entry point, rehearsed; the memory plan left to memory_refusals: it plans the layout launched.
    result = validate(spec, memory=False, rehearse=rehearse)
    if result.valid:
        return []
    errors = [f for f in result.findings if f.severity == "error"]
    return [GateRefusal(
        gate="config",
        message=f"train/config.yaml does not validate for {result.target}: "
        + "; ".join(f"{f.code} [{f.field}]: {f.message}" for f in errors),
        how_to_clear="apply the fixes: " + "; ".join(f.fix or f.code for f in errors)
        + " (edit train/config.yaml or re-emit it), until validate_grpo_config says valid")]


def cpu_vllm_refusals(spec: RunSpec) -> list[GateRefusal]:
    """A CPU run with vLLM: refused when vLLM's share of this host's RAM cannot start it (memory.cpu_vllm), as vLLM
    would refuse a minute into the run."""
    config = spec.values
    if not spec.target.cpu or not config.get("use_vllm"):
        return []
    colocated = (config.get("vllm_mode") or "colocate") == "colocate"
    share = GRPOView(config).vllm_gpu_memory_utilization if colocated else VLLM_CPU_MEMORY_SHARE
    memory = psutil.virtual_memory()
    problem = cpu_vllm_problem(config, float(share), memory.total, memory.available, colocated)
    if problem is None:
        return []
    return [GateRefusal(gate="memory", message=f"vLLM cannot start on this CPU: {problem}",
                        how_to_clear="raise vllm_gpu_memory_utilization (colocate), lower vllm_max_model_length, "
                        "free memory on this host, or set use_vllm: false")]


def memory_refusals(plan: LaunchPlan) -> list[GateRefusal]:
    """The memory plan's verdict on this layout: a run that will not fit is refused with the plan's reason."""
    if plan.memory is None or plan.memory.fits:
        return []
    return [GateRefusal(gate="memory", message=f"the run will not fit: {plan.memory.reason}",
                        how_to_clear="plan_memory on the run lists the levers and the smallest set that fits; apply it "
                        "to train/config.yaml (or re-emit), or target more or bigger GPUs")]


def foreign_output_dir(run: Run, config: dict) -> GateRefusal | None:
    """An output_dir that is not a folder of this run (another run's, after a copy with an old absolute path, or
    anywhere else, /tmp included): training would write its checkpoints there (issue 48)."""
    why = output_outside(run.dir, config.get("output_dir"))
    if why is None:
        return None
    inside = run.output_dir(config).resolve().is_relative_to(runs_root().resolve())
    return GateRefusal(gate="config", message=why + (" (it lies in another run directory: training would write "
                                                     "into that run)" if inside else ""),
                       how_to_clear="set output_dir: checkpoints in train/config.yaml (relative paths are relative "
                       "to the run directory)")


def what_runs(derived: DerivedState) -> str:
    """The live run in words: its backend's (e.g. a SLURM job), else its process here."""
    return derived.running_as or f"pid {derived.pid}"


def refused(run: Run, refusals: list[GateRefusal], state: str) -> LaunchResult:
    return LaunchResult(
        launched=False, run_dir=str(run.dir), refusals=refusals, state=state,
        message="refused by " + ", ".join(r.gate for r in refusals) + " gate(s): " + " | ".join(
            f"{r.gate}: {r.how_to_clear}" for r in refusals),
    )


def locked(run: Run, exc: RunLocked | LockNotOurs) -> LaunchResult:
    if isinstance(exc, LockNotOurs):  # round 17, b02: a link there was truncated through, even by a refused launch
        return refused(run, [GateRefusal(
            gate="lock", message=f"{run.name}: {exc}", how_to_clear="remove .launch.lock from the run directory "
            "(the file launch_training locks is the run's own: it makes a new one), then launch or resume again")],
            derive_state(run).state)
    return refused(run, [GateRefusal(
        gate="lock", message=str(exc),
        how_to_clear=f"wait for that call (pid {exc.holder.get('pid', 'unknown')}) to finish, then training_status; "
        "a second launch of one run is never started")], derive_state(run).state)


def cancelled(run: Run, state: str) -> LaunchResult | None:
    """The launch's answer when stop_training asked it, while it checked its gates, to start nothing
    (runlock.cancel_requested); asked at its last point before it writes or starts anything. None when not asked."""
    if not cancel_requested(run):
        return None
    return refused(run, [GateRefusal(
        gate="state", message=f"stop_training asked {run.name} to stop while this launch checked its gates: nothing "
        "was written or started", how_to_clear="launch again to start it")], state)

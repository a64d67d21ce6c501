"""launch_training and resume_training: the gates, then the run's launcher (training/launchers/) writes its files
and starts it; run.json records what was started.

Every launch on this machine writes train/launch.sh, a short readable script that runs the whole thing from the
run directory (vLLM server first when the config asks for server mode, then training) and records the exit code;
it is started in a new session with stdout/stderr to train/logs/stdout.log and the call returns at once (bash runs
the launch's own copy of it, beside the evidence key: bash reads a script as it runs, and the workspace's could be
rewritten meanwhile; launchers/local). A person can run the same script by hand. Several nodes (or
launcher=slurm): train/launch.slurm is written, checked with `sbatch --test-only` and submitted (its text on
stdin); the SLURM launcher (docs/slurm.md) records the job in run.json and answers for its status and stop.

Launchers by case (the training interpreter is LLM_FINETUNING_PYTHON, else the server's Python; train/train.py
runs through `-m mcp_server.training.trainer.verified_script`, which runs the bytes the verdict pinned):
- one process (one GPU or CPU):      python train/train.py --config train/config.yaml           (launchers/local/)
- several CPU processes:             torchrun --standalone --nproc_per_node N train/train.py ...  (launchers/local/)
- several GPUs:                      accelerate launch --config_file train/accelerate.yaml train/train.py ...
                                     (TRL's bundled zero2/zero3/fsdp2/multi_gpu config)      (launchers/accelerate/)
- several nodes:                     sbatch train/launch.slurm                                   (launchers/slurm/)

Nothing here knows a backend: the launcher that takes the launch plans, checks, writes, starts, reads and stops
it (launchers/base.py, the seam).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from mcp_server.evidence import key as evidence_key
from mcp_server.errors import UserInputError
from mcp_server.inspection.models import DifficultyFilterResult
from mcp_server.inspection.signal_share import launch_signal_warning
from mcp_server.memory.estimate import step_estimate
from mcp_server.recipe.runspec import RunSpec
from mcp_server.reporting import Report, silent
from mcp_server.runs import Run, resolve_run
from mcp_server.training.trainer.digest import checkpoint_problems
from mcp_server.training.derived import DerivedState
from mcp_server.training.launch_gates import (
    cancelled,
    check_gates,
    foreign_output_dir,
    interpreter_refusals,
    link_refusals,
    locked,
    memory_refusals,
    refused,
    what_runs,
)
from mcp_server.training.launchers import LAUNCHERS, Launcher, LaunchPlan, Start, choose, launcher_of, read_target
from mcp_server.training.models import GateRefusal, LaunchRequest, LaunchResult, RunRequest
from mcp_server.training.recording import record_in_git
from mcp_server.training.resume_patch import (apply_patch, apply_refilter, changed_text, config_hash_refusal,
                                              last_good_checkpoint)
from mcp_server.training.run_archive import ArchiveRefused, ArchiveSlot
from mcp_server.training.runlock import LockNotOurs, RunLocked, run_lock
from mcp_server.training.runrecord import checkpoints, passed_over, read_run_json
from mcp_server.training.runstate import derive_state
from mcp_server.workspace import archive_problem, sha256_file


def build_launch_plan(run: Run, request: LaunchRequest, extra_args: list[str] | None = None,
                      spec: RunSpec | None = None) -> LaunchPlan:
    """The plan of the launcher that takes this launch (launchers.choose), from the run as the launch read it
    (`spec`; read here when not given)."""
    spec = spec or RunSpec.of_run(run, request.vllm_server_gpus, request.num_nodes)
    target = read_target(run, request, spec, extra_args)
    # verdict.json as this launch read it: its gate judges it, the launcher passes its pins (round 18)
    return dataclasses.replace(choose(target).plan(target), verdict=spec.verdict)


def write_plan_files(run: Run, plan: LaunchPlan) -> dict:
    """The plan's files (train/launch.sh or train/launch.slurm, train/accelerate.yaml), by what they are."""
    return LAUNCHERS[plan.launcher].write(run, plan)


def _go(run: Run, spec: RunSpec, launcher: Launcher, plan: LaunchPlan, resumed_from: str | None = None,
        report: Report = silent, **start) -> LaunchResult:
    """Write the plan's files, commit the recipe, start: the same three steps for every launcher. `spec`: the run
    as the gates judged it (its config's hash is what run.json records). The evidence key is made first (its
    trainer signs its records with it and refuses to start without it: evidence.py)."""
    evidence_key(create=True)
    report(0, None, f"starting: writing the launch files, recording the recipe, starting {plan.launcher}")
    written = launcher.write(run, plan)
    sha = spec.config_sha256 or sha256_file(run.config)
    unrecorded: list[str] = []  # why the recipe was not committed (a repository not the workspace's: recording)
    commit = record_in_git(run, launcher.recorded(run), launcher.commit_message(run, bool(resumed_from), sha),
                           said=lambda why: (unrecorded.append(why), report(0, None, f"recording: {why}")))
    result = launcher.start(run, plan, written, Start(commit=commit, config_sha256=sha, config_values=spec.values,
                                                      previous=read_run_json(run), resumed_from=resumed_from, **start))
    return result.model_copy(update={"message": f"{result.message}; {unrecorded[0]}"}) if unrecorded else result


# ---------------------------------------------------------------- launch_training
def launch_training(request: LaunchRequest, report: Report = silent) -> LaunchResult:
    """Start a run after its gates pass: config valid, inspection verdict current, environment not blocked.
    One caller at a time per run (runlock); a run launched before is refused unless archive_previous."""
    run = resolve_run(request.run)
    try:
        with run_lock(run, "launch"):
            return _launch(run, request, report)
    except (RunLocked, LockNotOurs) as exc:
        return locked(run, exc)


def _launch_state_refusal(run: Run, derived: DerivedState, config: dict, launched: list[str],
                          request: LaunchRequest) -> LaunchResult | None:
    """A run launched before (without archive_previous) or an output_dir in another run: refused."""
    if launched and not request.archive_previous:
        done = checkpoints(run, config)
        return refused(run, [GateRefusal(
            gate="state", message=f"{run.name} was launched before (state {derived.state}; it holds "
            f"{', '.join(launched)}): a fresh launch would train over it"
            + (f" (latest checkpoint {done[-1].name})" if done else ""),
            how_to_clear=(_after_launch(derived) if done else "")
            + "emit_grpo_config (without run_dir) for a new run, or launch again with archive_previous "
            "(CLI: --archive-previous) to move this attempt to archive/ first")], derived.state)
    archive = archive_problem(run.dir) if launched else None  # before any gate: nothing moves through a link
    if archive:
        return refused(run, [GateRefusal(gate="state", message=archive, how_to_clear="replace archive/ with a "
                                         "directory inside the run (or remove it), then launch again")], derived.state)
    foreign = foreign_output_dir(run, config)
    return refused(run, [foreign], derived.state) if foreign else None


def _after_launch(derived: DerivedState) -> str:
    """How a run with checkpoints goes on, as resume_training would answer it (_resume_state_refusal; issue 49: a
    succeeded run was told to resume, and resume refuses one, patch or not: its promoted model would be
    overwritten)."""
    if derived.state == "succeeded":
        return ("it trained to its max_steps, and resume_training refuses a succeeded run (even with a patch raising "
                "max_steps: its promoted model would be overwritten); to train further, ")
    if (derived.record or derived.copied_record) is None:
        return "restore run.json (from git or a backup) to resume_training from the latest checkpoint, or "
    return "resume_training to continue from the latest checkpoint, "


def _launch(run: Run, request: LaunchRequest, report: Report = silent) -> LaunchResult:
    derived = derive_state(run)
    if derived.alive:
        return refused(run, [GateRefusal(
            gate="state", message=f"{run.name} is already {derived.state} ({what_runs(derived)})",
            how_to_clear="wait for it, or stop_training first")], derived.state)
    spec = RunSpec.of_run(run, request.vllm_server_gpus, request.num_nodes)  # the run's files, read once for every gate
    config = spec.values
    launched = run.launched_evidence(config)
    refusal = _launch_state_refusal(run, derived, config, launched, request)
    if refusal:
        return refusal
    other_python = interpreter_refusals(run)  # before anything starts the training interpreter
    if other_python:
        return refused(run, other_python, derived.state)
    plan = build_launch_plan(run, request, spec=spec)  # bad launch options are input errors, before any gate
    launcher = LAUNCHERS[plan.launcher]
    launcher.check(plan)  # e.g. the scheduler would take the job: else one line, nothing written
    refusals, env = check_gates(run, spec.launched_with(plan.strategy), environment=launcher.checks_environment,
                                report=report)
    refusals += memory_refusals(plan)
    if refusals:
        return refused(run, refusals, derived.state)
    stop = cancelled(run, derived.state)  # a stop asked meanwhile: nothing written yet, nothing starts
    if stop:
        return stop
    if launched:  # archive_previous: the earlier attempt moves aside before anything new is written
        try:
            _archive_attempt(run, config)
        except ArchiveRefused as exc:  # archive/ (or a folder of what moves) made a link since the check: nothing moved
            return refused(run, [GateRefusal(gate="state", message=exc.said, how_to_clear="replace it with a "
                                             "directory inside the run (or remove it), then launch again")],
                           derived.state)
    result = _go(run, spec, launcher, plan, report=report, env_verdict=env.get("verdict"), state_before=derived.state)
    return _with_estimate(run, result)


def _with_estimate(run: Run, result: LaunchResult, which: str = "first") -> LaunchResult:
    """A launched (or resumed: `which` "next") run's result with the planner's figure for its step, as
    training_status gives it before then (the readings the emission's figure stood on; walk 11: emission and status
    said 5.2 and 10.3 min a step), and the review's warning when its groups mostly score alike (walk 11; walk 13: a
    resume said neither)."""
    if not result.launched:
        return result
    said = launch_signal_warning(run)
    result = result.model_copy(update={"warnings": [*result.warnings, said]}) if said else result
    estimate = step_estimate(RunSpec.of_run(run), measure=False)  # its threads not yet in the load average
    if estimate is None:
        return result
    return result.model_copy(update={"message": f"{result.message}; {which} step expected {estimate.text}"})


def _archive_attempt(run: Run, config: dict) -> Path:
    """Move what a launch left (record, logs, checkpoints, promotion, export, plot) to archive/attempt-<n>/, through
    held directory descriptors (run_archive: a link planted at archive/ during the gates is refused, never
    followed)."""
    out = Path(os.path.normpath(run.output_dir(config)))
    movable = [run.run_json, run.logs, *sorted(run.train.glob("logs-attempt-*")), run.promotion,
               run.promotion_report, run.export, run.progress_plot]
    if out.is_relative_to(run.dir) and out != run.dir and out.resolve().is_relative_to(run.dir.resolve()):
        movable.append(out)
    with ArchiveSlot(run, "attempt") as slot:
        slot.move_in(movable)
        return slot.path


# ---------------------------------------------------------------- resume_training
def resume_training(request: RunRequest | LaunchRequest, report: Report = silent) -> LaunchResult:
    """Continue from the latest checkpoint with the same config (same sha256 as at launch), or refuse.
    One caller at a time per run (runlock)."""
    run = resolve_run(request.run)
    try:
        with run_lock(run, "resume"):
            return _naming_skipped(run, _resume(run, request, report))
    except (RunLocked, LockNotOurs) as exc:
        return locked(run, exc)


def _naming_skipped(run: Run, result: LaunchResult) -> LaunchResult:
    """The result naming each checkpoint-N after the latest complete one that is no checkpoint, and why
    (runrecord.passed_over): a resume never passes one over in silence (issue 48, round 8: a file added to
    checkpoint-3 and the resume quietly continued from checkpoint-2)."""
    try:
        config = RunSpec.of_run(run).values
    except UserInputError:  # a config the resume already refused, named
        return result
    done = checkpoints(run, config)
    skipped = passed_over(run, config, done[-1] if done else None)
    if not skipped:
        return result
    said = ("passed over, not complete checkpoints (a resume loads only a save the run's trainer recorded, every "
            "file as saved): " + ", ".join(skipped))
    return result.model_copy(update={"skipped_checkpoints": skipped, "message": f"{result.message}; {said}"})


def _resume_state_refusal(run: Run, derived: DerivedState, record: dict | None) -> LaunchResult | None:
    """A live run, or one never launched (or whose launch record is gone): nothing to resume."""
    if derived.alive:
        return refused(run, [GateRefusal(
            gate="state", message=f"{run.name} is still {derived.state} ({what_runs(derived)})",
            how_to_clear="nothing to resume while it runs; stop_training first if you meant to restart it",
        )], derived.state)
    if derived.state == "succeeded":  # issue 49: a resume trained past max_steps and rewrote the promoted weights
        return refused(run, [GateRefusal(
            gate="state", message=f"{run.name} succeeded: it trained to its max_steps, and its model (and what "
            "promote_checkpoint and export_model wrote about it) would be overwritten by a resume",
            how_to_clear="to train further, emit_grpo_config into a new run directory (a larger max_steps, or this "
            "run's model as the base) and launch that")], derived.state)
    if record is not None:
        return None
    if derived.note:  # launched once, but its record is gone: say what is known
        return refused(run, [GateRefusal(
            gate="state", message=f"{run.name}: {derived.note} Without the launch record the launched "
            "config cannot be checked, so it is not resumed",
            how_to_clear="restore run.json (from git or a backup), or launch_training with archive_previous to "
            "start over")], derived.state)
    return refused(run, [GateRefusal(
        gate="state", message=f"{run.name} was never launched, so there is nothing to resume",
        how_to_clear="launch_training starts it")], derived.state)


def _resume_refusals(run: Run, record: dict, config: dict, patch: dict | None) -> tuple[list[GateRefusal],
                                                                                         Path | None]:
    """The launched config unchanged, the output_dir the run's own, a checkpoint to resume from (after a guard
    stop with a patch: the last one saved before the stop's step)."""
    refusals = []
    if run.config.exists() and sha256_file(run.config) != record.get("config_sha256"):
        refusals.append(config_hash_refusal(run, record, config))
    # The config training will write with: a patch's output_dir into another run would train over that run's
    # checkpoints and its promoted, exported model.
    patched = {**config, **patch} if isinstance(patch, dict) else config
    foreign = foreign_output_dir(run, config) or foreign_output_dir(run, patched)
    if foreign:
        refusals.append(foreign)
    done = checkpoints(run, config)
    latest, why = last_good_checkpoint(run, done) if patch else (done[-1] if done else None, None)
    problems = checkpoint_problems(run, latest, contents=True) if latest is not None else []
    if problems:  # weights the run never wrote (replaced, added, cut short) are never loaded
        refusals.append(GateRefusal(
            gate="checkpoint", message=f"{latest.name} is not the checkpoint the run saved: " + "; ".join(problems[:5]),
            how_to_clear=f"restore {latest.name} as the run saved it, or remove it to resume from the one before"))
    planned = patched.get("max_steps")
    step = int(latest.name.split("-", 1)[1]) if latest is not None else None
    if isinstance(planned, int) and planned > 0 and step is not None and step >= planned:  # never past max_steps
        refusals.append(GateRefusal(
            gate="checkpoint", message=f"{latest.name} is at step {step}, and max_steps is {planned}: nothing is "
            "left to train, and a resume would train past max_steps",
            how_to_clear="resume with a patch raising max_steps (CLI: --patch '{\"max_steps\": N}'), or "
                         "emit_grpo_config into a new run directory with a larger max_steps, to train further"))
    if latest is None:
        refusals.append(GateRefusal(
            gate="checkpoint", message=f"no checkpoint under {config.get('output_dir', 'checkpoints')} to resume from"
            + (f" ({why}, and none was saved before it)" if why else ""),
            how_to_clear="launch_training with archive_previous starts it from the beginning (with the patch merged "
                         "into train/config.yaml); set save_steps so a later stop leaves a checkpoint"))
    return refusals, latest


def _resume(run: Run, request: RunRequest | LaunchRequest, report: Report = silent) -> LaunchResult:
    derived = derive_state(run)
    # A copied run continues from its own checkpoints under the launch record it was copied with.
    record = derived.record or derived.copied_record
    # same layout as the launch it continues, unless the request says otherwise
    launch = request if isinstance(request, LaunchRequest) else launcher_of(record).relaunch(record or {},
                                                                                               request.run)
    refusal = _resume_state_refusal(run, derived, record)
    if refusal:
        return refusal
    links = link_refusals(run)  # a logs folder that is a link holds no record of this run's saves: said first
    links = links or interpreter_refusals(run)  # before anything starts the training interpreter
    if links:
        return refused(run, links, derived.state)
    spec = RunSpec.of_run(run, launch.vllm_server_gpus, launch.num_nodes)  # the run's files, read once for every gate
    config = spec.values
    patch = getattr(request, "patch", None)
    refusals, latest = _resume_refusals(run, record, config, patch)
    if refusals:
        return refused(run, refusals, derived.state)
    undo, rule, refiltered = None, getattr(request, "refilter", None), None
    if patch and rule is not None:
        return refused(run, [GateRefusal(gate="config", message="patch and refilter together: one change per resume",
                                          how_to_clear="resume with the patch, then stop and resume with refilter "
                                                       "(or the other way round)")], derived.state)
    changed = None
    if patch:  # the way on after a guard stop: the root cause's patch, validated, the gate's pins moved for it
        refusals, undo, changed = apply_patch(run, spec, patch)
        if refusals:
            return refused(run, refusals, derived.state)
        spec = RunSpec.of_run(run, launch.vllm_server_gpus, launch.num_nodes)  # the patched config apply_patch wrote
    if rule is not None:  # the data re-filtered from the run's own logged completions (inspection.refilter)
        refusals, undo, refiltered = apply_refilter(run, rule)
        if refusals:
            return refused(run, refusals, derived.state)
        spec = RunSpec.of_run(run, launch.vllm_server_gpus, launch.num_nodes)  # the config naming the re-filtered data
    plan = build_launch_plan(run, launch, extra_args=["--resume_from_checkpoint", str(latest)], spec=spec)
    launcher = LAUNCHERS[plan.launcher]
    try:
        launcher.check(plan)
    except UserInputError:
        if undo:
            undo()  # the patched config goes back: nothing half-done stays
        raise
    try:  # the gates run workspace code apart: a worker that died there is an error, and the patch goes back
        gate_refusals, env = check_gates(run, spec.launched_with(plan.strategy),
                                         environment=launcher.checks_environment, report=report)
    except Exception:
        if undo:
            undo()
        raise
    gate_refusals += memory_refusals(plan)
    stop = None if gate_refusals else cancelled(run, derived.state)  # a stop asked meanwhile: nothing starts
    if gate_refusals or stop:
        if undo:
            undo()
        return stop or refused(run, gate_refusals, derived.state)
    _clear_markers(run)
    result = _with_estimate(run, _go(run, spec, launcher, plan, resumed_from=str(latest), report=report, patch=patch,
                                     env_verdict=env.get("verdict")), "next")
    if changed is not None:  # issue 49: the answer says what the patch changed, and where the launched config is
        kept = sorted(run.archive.glob("resume-patch-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))[-1:]
        said = (f"; patched {changed_text(changed)}" if changed else "; the patch changed nothing") + (
            f" (train/config.yaml; the launched config kept as {kept[0].relative_to(run.dir)}/config.yaml)"
            if kept else "")
        result = result.model_copy(update={"patched": changed, "message": result.message + said})
    return result.model_copy(update={"refilter": DifficultyFilterResult.model_validate(refiltered["result"])}) \
        if refiltered else result


def _clear_markers(run: Run) -> None:
    """Before a resume: the last attempt's end markers would otherwise describe the new process."""
    for marker in (run.stop_request, run.stopped, run.outcome, run.exit_code, run.exit_record, run.train_begin):
        marker.unlink(missing_ok=True)

"""training_status, stop_training and list_runs: read the run's process and files, act through files and signals."""

from __future__ import annotations

import math
import os
import stat
import time
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.errors import UserInputError, describe_failure, escaped_name, short
from mcp_server.memory.estimate import calibrate, step_estimate
from mcp_server.recipe.runspec import RunSpec
from mcp_server.training.models import (HealthFlag, RunList, RunSummary, StatusRequest, StopRequest, StopResult,
                                        TrainingStatus)
from mcp_server.runs import Run, all_runs, file_members, read_json_if_present, resolve_run
from mcp_server.training.derived import DerivedState
from mcp_server.training.trainer.guard import guard_mode
from mcp_server.training.launchers import launcher_of
from mcp_server.training.processes import one_look
from mcp_server.training.runrecord import checkpoints, highest_step, record_note, signed_record, sync_run_json
from mcp_server.reporting import Report, silent, ticking
from mcp_server.training.runstate import derive_state, last_progress, log_tail, read_progress
from mcp_server.training.runlock import await_launch
from mcp_server.training.stopping import STOP_TICK_S, STOP_WAIT_S, stop_wait, stopping_text
from mcp_server.worker import runs_in_training
from mcp_server.userfiles import not_regular
from mcp_server.workspace import atomic_save_figure, linked_out, runs_root
from mcp_server.diagnosis.diagnose import diagnose
from mcp_server.diagnosis.rate_applied import rate_note
from mcp_server.diagnosis.values import FLOAT32_MAX

PLOTTED = (("reward", "reward"), ("reward_std", "reward std"), ("kl", "KL"), ("entropy", "entropy"),
           ("completion_mean_length", "completion length"))
SPEED_WINDOW = 20  # progress lines used for steps/s
STEP_TIMES = 9  # the latest step times whose median is the step time


def _count(value) -> int | None:
    """A step or step count read from a file: a non-negative int, else None (a hand-edited file may hold anything)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _seconds(value) -> float | None:
    """A time or duration read from a file: a finite number, else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _max_steps(run: Run, config: dict) -> int | None:
    begin = read_json_if_present(run.train_begin) or {}
    if _count(begin.get("max_steps")):
        return begin["max_steps"]
    return _count(config.get(FIELD.max_steps)) or None


def _speed(lines: list[dict], since: float | None) -> float | None:
    """Steps per second: the median of the run's recent measured step times (`step_time`, the latest
    STEP_TIMES lines, across its attempts: a resume's first step, timed from its start, is one of them, never the
    rate; issue 49: one 21 s step after a resume gave "ETA 1.4 min" among steps of 200-360 s). Without step
    times, the latest lines of the current launch (a pause before a resume is not speed)."""
    times = sorted(t for t in (_seconds(l.get("step_time")) for l in lines[-STEP_TIMES:]) if t and t > 0)
    if times:
        middle = len(times) // 2
        return 1.0 / (times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2)
    window = [l for l in lines if _count(l.get("step")) is not None and _seconds(l.get("time")) is not None
              and (since is None or l["time"] >= since)][-SPEED_WINDOW:]
    if len(window) >= 2 and window[-1]["time"] > window[0]["time"] and window[-1]["step"] > window[0]["step"]:
        return (window[-1]["step"] - window[0]["step"]) / (window[-1]["time"] - window[0]["time"])
    return None


# ---------------------------------------------------------------- health (diagnosis hook)
def health_flags(run: Run) -> tuple[list[HealthFlag], str | None]:
    """The diagnosis rules (diagnose_run's core) on the run so far. A missing or failing diagnosis never
    breaks status: the note says why the flags are absent."""
    try:
        # Patches are not validated here (that imports TRL); diagnose_run gives validated patches.
        result = diagnose(run, validate_patches=False)
    except Exception as exc:  # a diagnosis bug must not hide the run's state
        return [], f"diagnosis failed: {type(exc).__name__}: {exc}"
    flags = [HealthFlag(code=f.code, severity=f.severity, explanation=f.explanation, patch=f.patch or None)
             for f in result.findings]
    if any(f.severity != "info" for f in flags):
        return flags, None
    # notes only (or none): the diagnosis' summary, "too early to judge" included (issue 49)
    return flags, f"no health flags: {result.summary}" if not flags else f"no problems flagged: {result.summary}"


# ---------------------------------------------------------------- plot
def plottable(value) -> bool:
    """A number matplotlib can place on an axis: finite and within float32's range (TRL's metrics are float32;
    1e308 would overflow the axis limits)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= FLOAT32_MAX
            and math.isfinite(value))


@runs_in_training  # needs torch / TRL / transformers: the training interpreter's worker
def plot_progress(run: Run, lines: list[dict]) -> Path | None:
    """reward, reward_std, KL, entropy and completion length over steps -> <run>/progress.png."""
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(len(PLOTTED), 1, figsize=(7, 2.0 * len(PLOTTED)), sharex=True)
    for ax, (key, label) in zip(axes, PLOTTED):
        points = [(l["step"], l[key]) for l in lines if plottable(l.get(key)) and plottable(l.get("step"))]
        if points:
            ax.plot(*zip(*points), marker="." if len(points) < 50 else None, linewidth=1.2)
        else:
            ax.text(0.5, 0.5, "not logged", transform=ax.transAxes, ha="center", va="center", color="grey")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 1.25 or 1.75 (walk 9)
    steps = [l["step"] for l in lines if plottable(l.get("step"))] or [0]  # walk 13: one step's axis 0.945-1.05
    axes[-1].set_xlim(*((min(steps) - 1, max(steps) + 1) if max(steps) - min(steps) < 2 else axes[-1].get_xlim()))
    fig.suptitle(run.name)
    fig.tight_layout()
    low, high = axes[-1].get_xlim()
    ticks = ", ".join(f"{t:g}" for t in axes[-1].get_xticks() if low <= t <= high) + f"; axis {low:g} to {high:g}"
    try:  # the step ticks drawn, also as text in the PNG: what a reader (or a test) can check without seeing it
        return atomic_save_figure(fig, run.progress_plot, dpi=90,
                                  metadata={"Description": PLOT_MARK, "Comment": f"step ticks: {ticks}"})
    except OSError as exc:  # crosses the worker as an input error: the status still answers (_plot)
        raise UserInputError("plot", f"progress.png could not be written ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)


# Written into each plot training_status draws (a PNG text chunk): a progress.png without it is not replaced.
PLOT_MARK = "llm-finetuning training_status progress plot"


def plot_refused(run: Run) -> str | None:
    """Why no plot is drawn into <run>/progress.png, else None. Round 14 D1: the read-only server (training_status
    declared as writing nothing) overwrote the person's own progress.png. The read-only mode writes no plot, and in
    any mode a progress.png that is not a plot this tool drew (no PLOT_MARK in it; a link, a folder) is left as it
    is, named."""
    from mcp_server.toolspec import read_only

    path = run.progress_plot
    if read_only():
        return f"no plot drawn: the read-only server writes nothing ({path} left as it is)"
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"no plot drawn: {path} cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(info.st_mode) and info.st_size <= 16 << 20:
        with open(path, "rb") as handle:
            if PLOT_MARK.encode() in handle.read():
                return None
    return (f"no plot drawn: {path} is there and is not a plot training_status drew, so it is left as it is; move "
            "it aside (or rename it) to have the plot drawn there")


def _plot(run: Run, lines: list[dict], derived: DerivedState) -> tuple[Path | None, DerivedState]:
    """(the plot, the state), or (None, the state noting why) when the disk refuses it (full, read-only), the
    server is read-only or the file there is not this tool's (plot_refused)."""
    refused = plot_refused(run)
    if refused:
        return None, derived.noted(refused)
    try:
        return plot_progress(run, lines), derived
    except UserInputError as exc:
        return None, derived.noted(str(exc).removeprefix("plot: "))


# How a message says each state (issue 49's sixth walk: "is succeeded"); a state not here reads "is <state>".
STATE_WORDS = {"succeeded": "succeeded", "stopped": "was stopped", "cancelled": "was cancelled",
               "timed_out": "timed out", "preempted": "was preempted"}


def _eta(steps_left: int, speed: float, last_step_time: float | None, step: int) -> tuple[float | None, str]:
    """(seconds to the last step, a note): the steps left at `speed`, less the time the step under way has run since
    the last logged one, never below the steps after it (issue 49's sixth walk: "ETA 8.0 min" for 5 minutes). A step
    under way past the time steps took so far is said as such, and the ETA is of the steps after it (None when there
    are none: issue 49 showed "ETA 0.0 min" while the last step was still running)."""
    whole = steps_left / speed
    if last_step_time is None:
        return whole, ""
    running = max(time.time() - last_step_time, 0.0)
    rest = max(steps_left - 1, 0) / speed
    if steps_left == 0 or running < 1 / speed:
        return max(whole - running, rest), ""
    return (rest or None), _overdue(step + 1, running, 1 / speed, "steps so far")


def _step_began(run: Run, derived: DerivedState, latest: dict) -> float | None:
    """When the step under way began: the last logged step's time, never before this launch's start (its signed
    train-begin record, else run.json's started_ts). Walk 10: after a stop and resume, "step 2 running for 133 s"
    counted the gap between the launches; the resumed trainer had begun 33 s before."""
    logged = _seconds(latest.get("time"))
    if logged is None:
        return None
    began = [_seconds((derived.record or {}).get("started_ts")),
             _seconds((signed_record(run, run.train_begin, derived.record) or {}).get("time"))]
    return max([logged, *(t for t in began if t is not None)])


def _overdue(step: int, running: float, expected: float, of: str) -> str:
    """The words for a step under way past the time it was expected to take: by how much, and against what."""
    return (f"; step {step} running for {running:.0f} s, longer than the {expected:.0f} s {of} "
            f"({_duration(running - expected)} over)")


def _before_first_step(run: Run, derived: DerivedState, estimate, max_steps: int | None) -> str:
    """What a live run with no step logged says (walk 9: nine minutes of "no step logged yet" with no time said and
    no word of the estimate passed): how long since the trainer began training (its signed train-begin record of
    this launch), else since the launch (the model still loading); past the estimate, by how much."""
    where = "no step logged yet"
    begin = signed_record(run, run.train_begin, derived.record) or {}
    began = _seconds(begin.get("time"))
    launched = _seconds((derived.record or {}).get("started_ts"))
    overdue = ""
    if began is not None:
        running = max(time.time() - began, 0.0)
        where += f", training began {_duration(running)} ago"
        if estimate is not None and running > estimate.step_s:
            overdue = _overdue((_count(begin.get("global_step")) or 0) + 1, running, estimate.step_s, "estimated")
    elif launched is not None:
        where += f", training not begun: launched {_duration(max(time.time() - launched, 0.0))} ago (loading)"
    if estimate is not None:
        overdue += f"; first step expected {_steps_take(estimate, max_steps)}"
    return where + overdue


def _estimate(run: Run, state: str, step: int | None):
    """No step yet (or not launched, never probing): the planner's figure for one on the readings the emission's
    stood on (issue 49: 7 min of "no step logged yet"; walk 11: emission and status 2x apart at one load)."""
    if step is None and state in ("starting", "running"):
        return step_estimate(RunSpec.of_run(run), running=True)
    return step_estimate(RunSpec.of_run(run), measure=False) if state == "not_launched" else None


def _steps_take(estimate, max_steps: int | None) -> str:
    return estimate.text + (f", so {max_steps} steps take about {_hours(estimate.step_s * max_steps)}"
                            if max_steps else "")


def _measured(run: Run, lines: list[dict], speed: float) -> str:
    """What an ETA after the first step stands on: the steps measured, no longer the planner's estimate (walk 11:
    the estimate said 10.3 min a step, the steps took 8-13 min); kept against the estimate, which the next runs'
    estimates on this machine are corrected by (estimate.calibrate; walk 12)."""
    calibrate(run, 1 / speed)
    timed = sum(1 for line in lines[-STEP_TIMES:] if (_seconds(line.get("step_time")) or 0) > 0)  # as _speed
    return f" (the measured {'step time' if timed else 'rate'}: {_duration(1 / speed)} a step, " + (
        f"the median of the last {timed} step{'s' if timed != 1 else ''} logged" if timed else
        "over the steps logged") + ", no longer the planner's estimate)"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"


def _hours(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


# ---------------------------------------------------------------- training_status
def _rate_noted(run: Run, config: dict, lines: list[dict], derived: DerivedState) -> DerivedState:
    """The state, noting a schedule that runs from another rate than the config's learning_rate (issue 49)."""
    rate_of = [(l, l.get("learning_rate", l.get("lr"))) for l in lines]  # TRL's name, else the contract's
    rates = [(l["step"], rate) for l, rate in rate_of
             if _count(l.get("step")) is not None and _seconds(rate) is not None]
    rate = rate_note(run, config, rates)
    return derived.noted(rate) if rate else derived


def training_status(request: StatusRequest) -> TrainingStatus:
    run = resolve_run(request.run)
    derived = sync_run_json(run, derive_state(run))
    record = derived.record or {}
    config = RunSpec.of_run(run).values
    lines, unread = read_progress(run)  # the trainer's signed lines alone; the others named
    if unread:
        derived = derived.noted(unread)
    derived = _rate_noted(run, config, lines, derived)
    latest = highest_step(lines) or {}  # the highest signed step, not the last line (round 16, F4a)
    state = derived.state
    max_steps = _max_steps(run, config)
    step = _count(latest.get("step"))
    speed = _speed(lines, record.get("started_ts")) if lines else None
    eta, overdue = (
        _eta(max(max_steps - step, 0), speed, _step_began(run, derived, latest), step)
        if (state == "running" and speed and max_steps and step is not None)
        else (None, "")
    )

    started = record.get("started_ts")
    if started is None:
        elapsed = None
    elif derived.alive:
        elapsed = time.time() - started
    else:
        end = _seconds((derived.outcome or {}).get("time")) or _seconds(latest.get("time")) or started
        elapsed = max(end - started, 0.0)

    estimate = _estimate(run, state, step)
    health, note = health_flags(run) if lines or state in ("failed",) else ([], "no metrics logged yet")
    guarded = signed_record(run, run.guard, derived.record) or {}  # the guard's own, of this launch
    unread = record_note(run, run.guard, derived.record)  # a hand-written one: named, never shown as the guard's
    if unread:
        derived = derived.noted(unread)
    live = [HealthFlag(code=f.get("code", "?"), severity=f.get("severity", "error"),
                       explanation=f.get("explanation", ""), patch=f.get("patch") or None)
            for f in guarded.get("findings", []) if isinstance(f, dict)]
    guard_stop = guarded.get("stopped") if isinstance(guarded.get("stopped"), dict) else None
    tail = log_tail(run, request.log_lines if state not in ("failed",) else max(request.log_lines, 20))
    plot, derived = _plot(run, lines, derived) if request.plot and lines else (None, derived)
    done = [str(p) for p in checkpoints(run, config)]

    if state == "not_launched":
        message = f"{run.name} has not been launched (launch_training starts it)" + (
            f"; a step expected {_steps_take(estimate, max_steps)}" if estimate else "")
    elif state == "unknown":
        message = f"{run.name}: state unknown"
    elif state == "failed":
        code = f"exit code {derived.exit_code}" if derived.exit_code is not None else "no exit code recorded (killed?)"
        message = f"{run.name} failed ({code}); last log line: {tail[-1] if tail else '(empty log)'}"
    else:
        where = f"step {step}/{max_steps or '?'}" if step is not None else "no step logged yet"
        if step is None and state in ("starting", "running"):
            where = _before_first_step(run, derived, estimate, max_steps)
        elif state == "stopping":  # what the stop waits for, with its figures (walk 12: none)
            where += stopping_text(run, record, step, _step_began(run, derived, latest) if step is not None else None)
        message = f"{run.name} {STATE_WORDS.get(state, 'is ' + state)}, {where}" + overdue + (
            f", ETA {eta / 60:.1f} min" + (" for the steps after it" if overdue else "") + _measured(run, lines, speed)
            if eta is not None else "")
    message += launcher_of(derived.record).status_text(derived)
    message += "".join(f"; {problem}" for problem in file_problems(run))
    if guard_stop and state == "stopped":
        message += (f"; stopped by the guard: {guard_stop.get('code')} at step {guard_stop.get('step')}"
                    + (" (checkpoint saved)" if guard_stop.get("save") else " (no checkpoint: resume from an earlier "
                                                                            "one)")
                    + "; apply the patch in train/logs/guard.json before resuming")

    return TrainingStatus(
        run_dir=str(run.dir), state=state, pid=derived.pid, alive=derived.alive, exit_code=derived.exit_code,
        started_at=record.get("started_at"), elapsed_s=round(elapsed, 1) if elapsed is not None else None,
        step=step, max_steps=max_steps, steps_per_s=round(speed, 5) if speed else None,
        eta_s=round(eta, 1) if eta is not None else None,
        step_estimate_s=estimate.step_s if estimate else None, step_estimate=estimate.text if estimate else None,
        latest=latest, checkpoints=done,
        stop_requested=derived.stop_requested, health=health, health_note=note, log_tail=tail,
        live_findings=live, guard=guard_mode(run), guard_stop=guard_stop,
        plot_path=str(plot) if plot else None, note=derived.note, job=derived.view,
        message=message + (f" ({derived.note})" if derived.note else ""),
    )


# ---------------------------------------------------------------- stop_training
def stop_training(request: StopRequest, report: Report = silent) -> StopResult:
    """Stop a live run through the launcher that started it (launchers.launcher_of): it asks the run for a
    checkpoint at its next step end and waits for that step (`timeout_s`, else as long as its logs say a step
    takes: stopping.stop_wait); it ends the run early only when asked to `kill` (local: the verified process
    group; SLURM: the run's own job), and says what that lost."""
    run = resolve_run(request.run)
    launch = _await_launch(run, request, report)  # a launch under way: asked to start nothing, awaited
    derived = derive_state(run)
    config = RunSpec.of_run(run).values
    note = f" ({derived.note})" if derived.note else ""
    if not derived.alive:
        sync_run_json(run, derived)
        done = checkpoints(run, config)
        return StopResult(run_dir=str(run.dir), state=derived.state, graceful=False, killed=False,
                          checkpoint=str(done[-1]) if done else None, waited_s=launch and launch["waited_s"],
                          message=_launch_said(run, launch, derived.state) if launch else
                          f"{run.name} is not running (state {derived.state}); nothing to stop{note}")
    sync_run_json(run, derived)  # a run.json lost or wrong is restored from the live launcher first
    wait, took = stop_wait(run)
    wait = request.timeout_s if request.timeout_s is not None else wait
    step = (last_progress(run) or {}).get("step")
    which = f"step {step + 1}" if isinstance(step, int) and not isinstance(step, bool) else "its first step"
    basis = "as asked" if request.timeout_s is not None else "an estimate"  # walk 13: "at most 147 s", took 473 s
    if wait > 0:  # at once: the wait can be minutes on a CPU (issue 49: 2m49s of silence)
        report(0, None, f"stopping {run.name}: waiting for {which} to end and its checkpoint to be saved (up to "
               f"{wait:.0f} s, {basis}" + (f"; its steps take up to {took:.0f} s" if took else "") + "; after it "
               "the stop returns and the run still stops by itself at its step end, nothing lost)")

    def still(elapsed: float) -> str:  # then a line every STOP_TICK_S (issue 49: 6 minutes without one)
        return f"stopping {run.name}: still waiting for {which} to end and its checkpoint to be saved, " \
            f"{elapsed:.0f} s of up to {wait:.0f} s ({basis})"

    with ticking(report, STOP_TICK_S, still):
        return launcher_of(derived.record).stop(run, derived, wait, config, note, kill=request.kill)


def _await_launch(run: Run, request: StopRequest, report: Report) -> dict | None:
    """A launch or resume of the run under way (its lock held; issue 48, round 12, M3: "nothing to stop", then it
    trained): asked to start nothing and awaited up to timeout_s (else STOP_WAIT_S's most), a line at once and
    every STOP_TICK_S. What runlock.await_launch says, None when no launch holds the lock."""
    wait = request.timeout_s if request.timeout_s is not None else STOP_WAIT_S[1]
    due = [0.0]

    def tick(elapsed: float) -> None:
        if elapsed >= due[0]:
            due[0] = elapsed + STOP_TICK_S
            report(0, None, f"stopping {run.name}: a launch of it is under way, asked to start nothing; waiting for "
                   f"it to answer ({elapsed:.0f} s of at most {wait:.0f} s)")
    return await_launch(run, wait, tick)


def _launch_said(run: Run, launch: dict, state: str) -> str:
    """What a stop says of a launch it found under way, when no trainer of the run is alive after its wait."""
    who = f"its {launch.get('action') or 'launch'} (pid {launch.get('pid', 'unknown')}" + (
        f", since {launch['since']})" if launch.get("since") else ")")
    if launch["ended"]:
        return (f"{run.name}: {who} was under way and was asked to start nothing; it ended without starting a "
                f"trainer (state {state}): nothing trains")
    return (f"{run.name}: {who} is under way and was asked to start nothing; it had not answered after "
            f"{launch['waited_s']:.0f} s. It starts nothing once it reaches its start, unless it had passed it: "
            "training_status shows which, and stop_training stops a run that started")


# ---------------------------------------------------------------- list_runs
def list_runs() -> RunList:
    """Every run under runs/. A run whose files cannot be read is listed as unreadable, with the file and why:
    one damaged run never hides the others."""
    runs = []
    listed, notes = _listed_runs()
    with one_look():  # one listing of this machine's processes for every run
        for run in listed:
            if escaped_name(str(run.dir)) != str(run.dir):  # bytes that are not UTF-8: no JSON string holds them
                runs.append(RunSummary(run=run.name, run_dir=escaped_name(str(run.dir)), state="unreadable",
                                       error=f"the folder's name is not UTF-8 (its bytes shown escaped: {run.name}): "
                                       "no tool can name it; rename it"))
                continue
            try:
                runs.append(_summary(run))
            except Exception as exc:  # noqa: BLE001 - whatever broke, the other runs still list
                runs.append(RunSummary(run=run.name, run_dir=str(run.dir), state="unreadable",
                                       error=describe_failure(exc)))
    return RunList(runs_root=escaped_name(str(runs_root())), runs=runs, notes=notes)


def _listed_runs() -> tuple[list[Run], list[str]]:
    """The runs list_runs reads, and a note for each entry of runs/ it does not. Round 14 F1: a link out of the
    workspace (runs/evil -> another workspace's run) was listed as this workspace's run while every other tool
    refuses it (workspace.linked_out, the same check). A link that leads to nothing, or to itself, is named too; a
    link to a folder inside the workspace is read, once: a run reached also by its own folder, or by another link
    listed before it, is not listed again."""
    notes, seen, keep = [], {}, []
    runs = all_runs()
    for run in sorted(runs, key=lambda r: r.dir.is_symlink()):  # a run's own folder before any link to it
        why = linked_out(run.dir)
        if why:
            notes.append(f"{escaped_name(run.name)} not listed: {why}")
            continue
        real = run.dir.resolve()
        if real in seen:
            notes.append(f"{escaped_name(run.name)} not listed: a link to {seen[real]}, listed as itself")
            continue
        seen[real] = escaped_name(run.name)
        keep.append(run)
    root = runs_root()
    for entry in sorted(root.iterdir() if root.is_dir() else (), key=lambda p: p.name):
        if entry.is_symlink() and not entry.name.startswith(".") and not entry.exists():
            why = linked_out(entry) or f"{entry} is a link to nothing ({escaped_name(os.readlink(entry))})"
            notes.append(f"{escaped_name(entry.name)} not listed: {why}")
    order = {id(r): i for i, r in enumerate(runs)}
    return sorted(keep, key=lambda r: order[id(r)]), notes


def file_problems(run: Run) -> list[str]:
    """Each file of the run's layout that is there but no regular file (a pipe, a directory, a device, a link to
    nothing), named with what it is."""
    found = ((getattr(run, name), not_regular(getattr(run, name))) for name in file_members())
    return [f"{short(path)} is {what}, not a file: move it aside (the run's tools read and write it as a file)"
            for path, what in found if what]


def _summary(run: Run) -> RunSummary:
    problems = file_problems(run)
    if problems:  # listed as unreadable, naming each file (a reader never waits on a pipe: userfiles.open_regular)
        raise UserInputError("run", "; ".join(problems))
    derived = sync_run_json(run, derive_state(run))
    spec = RunSpec.of_run(run)
    request, config = spec.request, spec.values
    latest = last_progress(run) or {}
    model = request.model or config.get(FIELD.model_name_or_path)
    started = (derived.record or {}).get("started_at")
    return RunSummary(
        run=run.name, run_dir=str(run.dir), state=derived.state, step=_count(latest.get("step")),
        max_steps=_max_steps(run, config), model=model if isinstance(model, str) else None,
        started_at=started if isinstance(started, str) else None,
    )

"""How long a stop waits, and what it then says (below the launchers, which stop; status.py asks them).

A stop asks the run to save at its next step end (train/logs/stop-request.json, read by the trainer's progress
callback) and waits for that step: the run's own logs say how long a step takes (the longest recent `step_time`,
a CPU step can take minutes). A run still in its step when the wait ends is left `stopping`: it saves and exits
there by itself, nothing lost. Only a stop asked to kill ends it early, and that loss is an error in the result
(issue 49: a default 120 s timeout killed a run whose steps took 3-7 minutes and called it a stop).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from mcp_server.diagnosis.progress_log import run_progress
from mcp_server.runs import Run, read_json_if_present
from mcp_server.training.derived import DerivedState
from mcp_server.training.models import StopResult
from mcp_server.training.runrecord import checkpoints, signed_record, stop_failure, stopped_save

STOP_WAIT_S = (120.0, 900.0)  # the default wait for the run's step end: at least, at most
SAVE_MARGIN_S = 60.0  # beyond the step's expected end: the checkpoint's save
STEP_WINDOW = 20  # progress lines whose step times are read
STOP_TICK_S = 30.0  # while a stop waits: a line this often (status.stop_training; issue 49: 6 minutes of silence)


def _positive(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def _lines(run: Run) -> list[dict]:
    try:
        return run_progress(run).records[-STEP_WINDOW:]  # the trainer's signed lines alone
    except OSError:
        return []


def step_time(run: Run) -> float | None:
    """The run's step time as its logs show it: the longest `step_time` among its latest progress lines (a step
    varies: generation lengths, a save), None before its first logged step."""
    times = [t for t in (_positive(line.get("step_time")) for line in _lines(run)) if t is not None]
    return max(times) if times else None


def stop_wait(run: Run, now: float | None = None) -> tuple[float, float | None]:
    """(seconds a stop waits by default, the step time it read): until the current step's expected end (the last
    logged step's time, else training's start, plus one step time and half another for a slow one) plus the save,
    within STOP_WAIT_S; before the first step the planner's step time stands in; without either, the least of
    STOP_WAIT_S."""
    now = time.time() if now is None else now
    step = step_time(run)
    lines = _lines(run)
    last = _positive(lines[-1].get("time")) if lines else None
    if last is None:
        last = _positive((read_json_if_present(run.train_begin) or {}).get("time"))
    expected = step if step is not None or lines else _planned_step_s(run)  # the first step: the planner's figure
    if expected is None or last is None:
        return STOP_WAIT_S[0], step
    wait = max(last + expected - now, 0.0) + 0.5 * expected + SAVE_MARGIN_S
    return min(max(wait, STOP_WAIT_S[0]), STOP_WAIT_S[1]), step


def stopping_text(run: Run, record: dict | None, step: int | None, began: float | None,
                  now: float | None = None) -> str:
    """What training_status says of a run that is stopping (walk 12: "is stopping, step 2/8" and no figure): the
    step it waits for, how long that step has run against what a step takes (the run's logged step times, else the
    planner's figure for a first step), when the step should end with its save, and the stop's own deadline (the
    wait stop_training announced, kept in the stop request; after it the run still stops by itself)."""
    now = time.time() if now is None else now
    which = f"step {step + 1}" if step is not None else "its first step"
    logged = step_time(run)
    expected = logged if logged is not None else _planned_step_s(run)
    said = f"; waiting for {which} to end and its checkpoint to be saved"
    if began is None:  # its first step: from the trainer's start (this launch's signed record)
        began = _positive((signed_record(run, run.train_begin, record) or {}).get("time"))
    if began is not None:
        running = max(now - began, 0.0)
        said += f": running for {running:.0f} s"
        if expected is not None:
            of = "its steps take up to" if logged is not None else "the planner's estimate"
            end = max(began + expected - now, 0.0) + SAVE_MARGIN_S
            said += (f" of about {expected:.0f} s ({of} {expected:.0f} s)" if running <= expected else
                     f", past the {expected:.0f} s {'its steps take' if logged is not None else 'estimated'}") + (
                f", expected to end with its save within about {end:.0f} s")
    request = signed_record(run, run.stop_request, record) or {}  # this launch's request alone
    asked, wait = _positive(request.get("time")), request.get("wait_s")
    if asked is not None:
        wait = wait if _positive(wait) is not None or wait == 0 else stop_wait(run, now=asked)[0]
        left = asked + wait - now
        said += (f"; the stop was asked {max(now - asked, 0.0):.0f} s ago and waits at most {wait:.0f} s ("
                 + (f"{left:.0f} s left" if left > 0 else f"its deadline passed {-left:.0f} s ago")
                 + "); after it the run still stops by itself at its step end, nothing lost")
    return said


def _planned_step_s(run: Run) -> float | None:
    """The planner's seconds per step for the run (what training_status says of the first step), None where it
    cannot say: a stop during the first step waits for it (the seventh walk: 120 s while the step took 4-9 min)."""
    from mcp_server.memory.estimate import step_estimate
    from mcp_server.recipe.runspec import RunSpec

    try:
        estimate = step_estimate(RunSpec.of_run(run), measure=False, running=True)  # its own threads are the run's
    except Exception:  # noqa: BLE001 - a run the planner cannot read waits the default
        return None
    return _positive(estimate.step_s) if estimate is not None else None


def stop_result(run: Run, after: DerivedState, config: dict, graceful: bool, killed: bool, waited: float,
                timeout_s: float, note: str, asked: bool = True, who: str | None = None) -> StopResult:
    """The stop's result from the state after it: stopped with the checkpoint it saved; still stopping (left to
    finish its step); or killed, with what was lost as `error`. `graceful` (the run ended while the stop waited)
    holds only when the trainer's signed stopped.json names a step whose checkpoint is complete (its save in
    saves.jsonl, every file as saved): a save that failed at the stop is an error naming it, never "saved" (issue
    48, round 8). `who`: the run in words (a SLURM job)."""
    done = checkpoints(run, config)
    latest = Path(done[-1]).name if done else None
    step = step_time(run)
    name = who or run.name
    error = None
    ended = graceful and after.state == "succeeded"  # it reached its end (its final save) before its stop
    failure = stop_failure(run, after.record, after.exit_code) if graceful and not ended else None
    if ended:
        message = f"{name} ended ({after.state}) while the stop waited"
    elif graceful and failure:
        graceful = False
        error = failure
        message = f"{name} ended ({after.state}) while the stop waited, without its checkpoint: {failure}"
    elif graceful:
        saved, _ = stopped_save(run, after.record)
        message = f"{name} stopped at step {saved} with a checkpoint saved; resume_training continues it"
    elif killed:
        error = (f"killed after {timeout_s:.0f} s (kill was asked) before it reached its step end: the steps since "
                 + (f"{latest} are lost" if latest else "its start are lost (no checkpoint was saved)"))
        message = f"{name} did not stop within {timeout_s:.0f} s and was killed; " + error
    elif after.alive:
        per = f"its steps take up to {step:.0f} s (its logs)" if step else "no step is logged yet"
        message = (f"{name} is stopping: asked to save and stop at its step end, still in its step after "
                   f"{waited:.0f} s ({per}; the wait was an estimate, not a bound on the step); it stops by itself "
                   "there, nothing is lost. training_status shows "
                   "when; stop_training with kill ends it now, losing the steps since "
                   + (latest or "its start"))
        if not asked:
            message = f"{name}: the stop request could not be written (train/logs/); stop_training with kill ends it"
    else:
        message = f"{name} ended ({after.state}) while the stop waited"
    return StopResult(run_dir=str(run.dir), state=after.state, graceful=graceful, killed=killed,
                      checkpoint=str(done[-1]) if done else None, waited_s=waited,
                      step_time_s=round(step, 1) if step else None, error=error, message=message + note)

"""Which model of its run an export is, for the model card: the step it was saved at, the run's state, and a
reproduce line that gives that model (walk 12: checkpoint-3 of a run stopped at step 3 of 8 was exported with a
card that named neither, and said "Reproduce: `python train/train.py --config train/config.yaml`", which trains
all 8 steps, not the model exported).

The step is the trainer's signed save line's (train/logs/saves.jsonl), else the checkpoint-N folder's name. A run
of max_steps N repeats the first N steps of a longer one only when the learning rate does not depend on
max_steps (a constant schedule, a warm-up given in steps); otherwise no one command gives the checkpoint, and the
card says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from mcp_server.config import GRPOView
from mcp_server.runs import Run, read_json_if_present
from mcp_server.training.runstate import derive_state
from mcp_server.training.trainer.digest import read_saves, save_key

RUN = "`python train/train.py --config train/config.yaml` in the run directory"
FLAT = ("constant", "constant_with_warmup")  # schedules whose rate at step k does not depend on max_steps


class CardStep(NamedTuple):
    """The exported model's place in its run."""

    step: int | None  # the optimizer step it was saved at (None: unrecorded)
    max_steps: int | None  # the config's (None: not set, epochs decide)
    state: str  # the run's state at export: succeeded, stopped, not_launched ...
    stopped_at: int | None  # the step a stopped run stopped at (stopped.json)
    checkpoint: str | None  # "checkpoint-N" when a checkpoint was exported, None for the output_dir
    schedule: str  # lr_scheduler_type as trained
    warmup: float  # warmup_steps (below 1: a fraction of max_steps)
    save_steps: float | None


def card_step(run: Run, config: dict, ckpt: Path, given: bool) -> CardStep:
    """The exported model's step and its run's state, from the run's signed records and its config."""
    key = save_key(run, ckpt)
    saved = [line for line in read_saves(run) if line.get("save") == key and isinstance(line.get("step"), int)]
    step = saved[-1]["step"] if saved else None
    name = ckpt.name
    if step is None and given and name.startswith("checkpoint-") and name[11:].isdigit():
        step = int(name[11:])
    stopped = read_json_if_present(run.stopped)
    view = GRPOView(config)
    max_steps = view.max_steps if isinstance(view.max_steps, int) and view.max_steps > 0 else None
    state = derive_state(run).state
    return CardStep(step, max_steps, state,
                    stopped.get("step") if state == "stopped" and isinstance(stopped, dict) else None,
                    name if given else None, str(view.lr_scheduler_type or "linear"),
                    float(view.warmup_steps or 0), view.save_steps)


def _of(n: int | None) -> str:
    return "an unrecorded step" if n is None else f"step {n}"


def step_rows(at: CardStep) -> list[str]:
    """The card's table rows: the model's step and the run's state."""
    total = f" of {at.max_steps}" if at.max_steps else ""
    where = f" ({at.checkpoint})" if at.checkpoint else " (its output_dir)"
    state = at.state
    if at.state == "stopped":
        state = f"stopped at {_of(at.stopped_at)}{total}" + ("" if at.max_steps else " (max_steps unset)")
    elif at.state == "succeeded" and at.max_steps:
        state = f"succeeded: trained {at.max_steps} of {at.max_steps} steps"
    return [f"| Training step | {_of(at.step)}{total}{where} |", f"| Run state at export | {state} |"]


def reproduce(at: CardStep) -> list[str]:
    """The card's closing lines: how to train this model again, or plainly why one command cannot."""
    whole = at.step is not None and at.max_steps is not None and at.step >= at.max_steps
    if whole or (at.step is None and at.checkpoint is None and at.state == "succeeded"):
        return [f"Reproduce: {RUN}" + (f" (max_steps {at.max_steps})." if at.max_steps else ".")]
    lines = []
    if at.state == "stopped":
        lines.append(f"**This is {at.checkpoint or 'the output_dir'} of a run stopped at {_of(at.stopped_at)} of "
                     f"{at.max_steps or 'its'} steps: not the model its config trains to the end.**")
    if at.step is None:
        return [*lines, "", f"Reproduce: not by one command: the step this model was saved at is unrecorded (no "
                            f"signed save line names it); {RUN} trains the config's whole run."]
    if at.schedule in FLAT and not 0 < at.warmup < 1:
        return [*lines, "", f"Reproduce: set `max_steps: {at.step}` in train/config.yaml (an unpinned field: the "
                            f"inspection verdict holds), then {RUN}: lr_scheduler_type {at.schedule} does not depend "
                            f"on max_steps, so those {at.step} steps are this model's (as far as sampling repeats). "
                            f"The config as it is trains {at.max_steps or 'all its'} steps."]
    why = (f"warmup_steps {at.warmup:g} is a fraction of max_steps" if at.schedule in FLAT
           else f"lr_scheduler_type {at.schedule} changes the rate with max_steps")
    every = f"save_steps {at.save_steps:g}" if isinstance(at.save_steps, (int, float)) else "its save_steps"
    return [*lines, "", f"Reproduce: not by one command: {why}, so a run of max_steps {at.step} takes other steps "
                        f"than the first {at.step} of {at.max_steps or 'the whole run'}. {RUN} trains the whole run; "
                        f"its checkpoint-{at.step} is this model only if {every} saves one at step {at.step}."]

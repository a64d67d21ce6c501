"""Rules for the settings that lose a run's work or its record: checkpoints that come too late or cannot resume,
logging too sparse to read a trend from, a warm-up longer than the run. TRL and transformers accept all of them.

transformers' DefaultFlowCallback (trainer_callback.py) saves at every multiple of save_steps and at the last step,
and logs at every multiple of logging_steps: a save_steps past the run's length leaves no checkpoint until the
last step, a logging_steps past it no row at all. With save_only_model a checkpoint holds no optimizer, scheduler
or RNG state (trainer.py `if not self.args.save_only_model: self._save_optimizer_and_scheduler`), and resuming
from it silently restarts AdamW's moments and the learning-rate schedule (its warm-up included) from zero.
"""

from __future__ import annotations

import math

from mcp_server.config import FIELD
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import Finding
from mcp_server.recipe.run_rules import data_prompts, generation_batch, steps_per_generation

# From this many optimizer steps a run keeps a checkpoint before its end (a crash or a preemption then costs at
# most save_steps, not the run).
KEEP_FROM_STEPS = 50
# The diagnosis calls a trend from this many logged rows, and the emitter logs at least this many (issue 34).
MIN_LOGGED_ROWS = 20


def planned_steps(ctx: Context) -> int | None:
    """The run's optimizer steps: max_steps, else num_train_epochs over the local data set (whole generation
    batches per epoch, as TRL's sampler yields them, x the optimizer steps each one feeds), else None."""
    max_steps = ctx.config.max_steps
    if isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps > 0:
        return max_steps
    prompts, batch, g = data_prompts(ctx), generation_batch(ctx), ctx.config.num_generations
    spg, ga, iterations = steps_per_generation(ctx), ctx.config.gradient_accumulation_steps, ctx.config.num_iterations
    epochs = ctx.config.num_train_epochs
    if not all(isinstance(v, (int, float)) and v > 0 for v in (prompts, batch, g, spg, ga, iterations, epochs)):
        return None
    rounds = prompts // max(batch // g, 1)
    return int(epochs * rounds * max(spg // ga, 1) * iterations) or None


def _interval(value, steps: int) -> int | None:
    """An interval in steps: transformers reads a float below 1 as a fraction of the run."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return None
    return max(int(value * steps), 1) if value < 1 else int(value)


def rule_checkpoints(ctx: Context) -> list[Finding]:
    steps, cfg = planned_steps(ctx), ctx.config
    if steps is None or steps < KEEP_FROM_STEPS:
        return []
    if cfg.save_strategy == "no":
        return [finding(
            "no_checkpoints", FIELD.save_strategy, "warning",
            f"save_strategy=no on a {steps}-step run: no checkpoint is written, so a crash, an out-of-memory or a "
            "preemption loses the whole run, and resume_training has nothing to continue from.",
            f"set save_strategy: steps with save_steps of about {max(steps // 10, 1)} and save_total_limit: 2")]
    every = _interval(cfg.save_steps, steps)
    if cfg.save_strategy == "steps" and every is not None and every >= steps:
        return [finding(
            "checkpoint_after_run", FIELD.save_steps, "warning",
            f"save_steps={cfg.save_steps:g} is not below the run's {steps} optimizer steps: the only checkpoint is "
            "written at the last step, so a crash or a preemption before it loses the whole run.",
            f"set save_steps to about {max(steps // 10, 1)} (with save_total_limit: 2 to bound the disk)")]
    return []


def rule_resumable(ctx: Context) -> list[Finding]:
    cfg = ctx.config
    if not cfg.save_only_model or cfg.save_strategy == "no":
        return []
    meant = bool(cfg.resume_from_checkpoint)
    return [finding(
        "checkpoints_cannot_resume", FIELD.save_only_model, "error" if meant else "warning",
        "save_only_model=true: checkpoints hold the weights only, no optimizer, scheduler or RNG state. Resuming "
        + ("(resume_from_checkpoint is set) " if meant else "(resume_training, or resume_from_checkpoint) ")
        + "silently restarts AdamW's moments and the learning-rate schedule from zero, warm-up included.",
        "set save_only_model: false (and save_total_limit: 2 to bound the disk)")]


def rule_logging(ctx: Context) -> list[Finding]:
    steps, cfg = planned_steps(ctx), ctx.config
    if steps is None or cfg.logging_strategy != "steps":
        return []
    every = _interval(cfg.logging_steps, steps)
    if every is None:
        return []
    rows = steps // every
    if rows >= min(MIN_LOGGED_ROWS, steps):
        return []
    suggested = max(1, steps // MIN_LOGGED_ROWS) if steps >= 100 else 1
    what = ("no row is logged" + (" but the first (logging_first_step)" if cfg.logging_first_step else "")
            if rows == 0 else f"only {rows} row{'s' if rows > 1 else ''} {'are' if rows > 1 else 'is'} logged")
    return [finding(
        "too_few_logged_rows", FIELD.logging_steps, "warning" if rows else "error",
        f"logging_steps={cfg.logging_steps:g} over a {steps}-step run: {what}. The diagnosis needs "
        f"{MIN_LOGGED_ROWS} rows to call a trend, and the live guard reads the logged rows to stop a collapsing "
        "run in time.", f"set logging_steps: {suggested}")]


def rule_warmup(ctx: Context) -> list[Finding]:
    steps, cfg = planned_steps(ctx), ctx.config
    warmup = cfg.warmup_steps
    if steps is None or not isinstance(warmup, (int, float)) or isinstance(warmup, bool) or warmup <= 0:
        return []
    warm = int(warmup) if warmup >= 1 else math.ceil(warmup * steps)  # TrainingArguments.get_warmup_steps
    if warm < steps:
        return []
    return [finding(
        "warmup_longer_than_run", FIELD.warmup_steps, "warning",
        f"warmup_steps={warmup:g} is {warm} steps, not below the run's {steps}: the learning rate is still "
        "climbing when training ends, so the run never trains at its learning rate.",
        f"set warmup_steps to at most {max(steps // 20, 1)} (5% of the run; DAPO: 20 rollout steps)")]


# Topic "saving and logging".
RULES = (Rule(rule_checkpoints), Rule(rule_resumable), Rule(rule_logging), Rule(rule_warmup))

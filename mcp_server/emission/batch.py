"""Prompts per optimizer step and the learning-rate schedule of an emitted config, sized by the memory plan and the
data set.

Prompts per step: DAPO's mini-batch is 32 prompts per optimizer step (paper sec. 4.1); the seed recipe's 8 x 4
completions are only 4 prompts of 8. The emitter grows per_device_train_batch_size while the plan still fits with
10% headroom (larger micro-batches use the memory the plan found and speed the step), then the accumulation steps
up to 32 prompts, never past what the data set affords (at least two generation batches per epoch: TRL's sampler
drops an incomplete one).

Schedule: TRL's default is linear decay to 0 over num_train_epochs 3 with no warm-up, so the last updates are
nearly zero and the first ones use full Adam steps on a cold second-moment estimate. Published GRPO recipes train
at a constant rate after a short warm-up (DAPO: 20 rollout steps; DeepSeekMath and Dr.GRPO: constant).
"""

from __future__ import annotations

import math

from mcp_server.config import FIELD
from mcp_server.config.batches import generation_batch
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.config.recipe import Recipe
from mcp_server.emission.fit import Planner
from mcp_server.recipe.keep_rules import KEEP_FROM_STEPS, MIN_LOGGED_ROWS
from mcp_server.recipe.variants import off_policy_fields

PROMPTS_PER_STEP = 32  # DAPO sec. 4.1: 512 prompts per rollout in mini-batches of 32 prompts
MAX_PER_DEVICE = 32  # completions per micro-batch: past this the step is long and the gain small
WARMUP_FRACTION = 0.05  # of the run's optimizer steps (none under 10 steps), at most WARMUP_MAX
WARMUP_MAX = 20  # DAPO warms up over 20 rollout steps
EPOCHS = 3  # TRL's num_train_epochs default, stated as max_steps when the data set's size is known
EVERY_STEP_BELOW = 100  # runs shorter than this log every step
CHECKPOINTS_PER_RUN = 10  # a crash or a preemption costs at most a tenth of the run
KEPT_CHECKPOINTS = 3  # the guard's stop step and two before it (resume_training goes back past the stop step)
BATCH_KEYS = {FIELD.per_device_train_batch_size, FIELD.gradient_accumulation_steps, FIELD.steps_per_generation,
              FIELD.generation_batch_size, FIELD.num_generations}


def _fits(plan_of: Planner, values: dict) -> bool:
    plan = plan_of(values)
    return plan is not None and plan.status == "fits"


def _with_accumulation(values: dict, per_device: int, ga: int, mini_batches: int) -> dict:
    grown = {**values, FIELD.per_device_train_batch_size: per_device, FIELD.gradient_accumulation_steps: ga}
    if FIELD.steps_per_generation in values:
        grown[FIELD.steps_per_generation] = mini_batches * ga
    return grown


def size_batch(recipe: Recipe, plan_of: Planner, request, prompts: int | None, variant: str) -> Recipe:
    """Grow the micro-batch into the memory the plan found and the accumulation up to PROMPTS_PER_STEP prompts per
    optimizer step, within the data set."""
    values = recipe.values
    plan = plan_of(values)
    if plan is None or plan.status != "fits" or BATCH_KEYS & set(request.overrides):
        return recipe
    view = GRPOView(values)
    g, world = view.num_generations, max(plan.launch.training_processes, 1)
    mini_batches = values.get(FIELD.steps_per_generation, 1) // view.gradient_accumulation_steps or 1
    target = PROMPTS_PER_STEP
    if prompts:  # at least two generation batches (mini_batches optimizer steps each) per epoch
        target = max(1, min(target, prompts // (2 * mini_batches)))
    completions = target * g
    per_device = start = view.per_device_train_batch_size
    while (per_device * 2 <= MAX_PER_DEVICE and per_device * 2 * world <= completions
           and _fits(plan_of, {**values, FIELD.per_device_train_batch_size: per_device * 2})):
        per_device *= 2
    ga = max(1, math.ceil(completions / (per_device * world)))
    while (per_device * world * ga) % g:
        ga += 1
    # more accumulation means a longer generation round (transformers' generate holds its KV cache at once)
    start_ga = view.gradient_accumulation_steps
    while ga > start_ga and not _fits(plan_of, _with_accumulation(values, per_device, ga, mini_batches)):
        ga -= 1
        while ga > start_ga and (per_device * world * ga) % g:
            ga -= 1
    step_prompts = per_device * world * ga // g
    grown = (f"; {per_device} fit{'s' if per_device == start else ' (grown from ' + str(start) + ')'} with 10% "
             f"headroom on the {plan.gpu} (memory plan)")
    recipe = recipe.with_values(
        {FIELD.per_device_train_batch_size: per_device, FIELD.gradient_accumulation_steps: ga},
        {FIELD.per_device_train_batch_size: f"{per_device} completions per micro-batch per GPU{grown}",
         FIELD.gradient_accumulation_steps: (
             f"{ga} micro-batches x {per_device} x {world} GPU(s) = {per_device * world * ga} completions: "
             f"{step_prompts} prompts of {g} per optimizer step (DAPO's mini-batch is {PROMPTS_PER_STEP} prompts"
             + (f"; this data set's {prompts} prompts aim at {target}, two generation batches per epoch)" if prompts
                and target < PROMPTS_PER_STEP else ")"))}, "plan")
    if FIELD.steps_per_generation in values:  # the variant's mini-batches per rollout, over the new accumulation
        recipe = recipe.merged(off_policy_fields(variant, ga))
    return recipe


def schedule(recipe: Recipe, prompts: int | None, world: int, overrides: dict) -> Recipe:
    """A constant rate after a short linear warm-up, and max_steps when the data set's size is known. Only a
    schedule of the person's own replaces the constant rate: an override of max_steps or warmup_steps alone once
    dropped it, and TRL's linear decay to 0 took its place unannounced."""
    if FIELD.lr_scheduler_type not in overrides:
        recipe = recipe.with_value(FIELD.lr_scheduler_type, "constant_with_warmup", (
            "constant after warm-up, as DAPO, DeepSeekMath and Dr.GRPO train; TRL's default linear decay to 0 over "
            "3 epochs shrinks the last updates to nothing"), "plan")
    view = recipe.view()
    ga = view.gradient_accumulation_steps
    spg = recipe.get(FIELD.steps_per_generation, ga)  # TRL's None means: gradient_accumulation_steps
    rollout_prompts = generation_batch(view.per_device_train_batch_size, world, spg) // view.num_generations
    asked = GRPOView.given(overrides).max_steps
    steps = asked if isinstance(asked, int) else None
    if steps is None and prompts and isinstance(spg, int) and isinstance(ga, int) and rollout_prompts > 0:
        # whole generation batches per epoch (TRL's sampler drops the rest) x the optimizer steps each one feeds
        steps = EPOCHS * (prompts // rollout_prompts) * max(spg // ga, 1) * view.num_iterations
    if steps and steps > 0 and FIELD.max_steps not in overrides:
        recipe = recipe.with_value(FIELD.max_steps, steps, (
            f"{EPOCHS} epochs (TRL's default) of this data set's {prompts} prompts: {steps} optimizer steps; raise it "
            "for a longer run (the constant rate does not depend on it)"), "plan")
    recipe = keep_and_log(recipe, steps, overrides)
    if FIELD.warmup_steps not in overrides:
        # constant_with_warmup starts at 0: a 1-step warm-up on a short run would waste its first update
        warmup = min(WARMUP_MAX, round(WARMUP_FRACTION * steps)) if steps and steps > 0 else WARMUP_MAX // 2
        if warmup:  # else TRL's default 0
            recipe = recipe.with_value(FIELD.warmup_steps, warmup, (
                f"{warmup} optimizer steps of linear warm-up ("
                + (f"5% of {steps}" if steps else "the data set's size is unknown here")
                + f", at most DAPO's {WARMUP_MAX}): Adam's first steps are full-size on a cold second-moment estimate"),
                "plan")
    return recipe


def keep_and_log(recipe: Recipe, steps: int | None, overrides: dict) -> Recipe:
    """logging_steps for at least MIN_LOGGED_ROWS rows (every step under EVERY_STEP_BELOW steps) and save_steps
    for CHECKPOINTS_PER_RUN checkpoints, for the run's length when it is known."""
    if FIELD.logging_steps not in overrides and steps and steps > 0:
        every = 1 if steps < EVERY_STEP_BELOW else min(10, steps // MIN_LOGGED_ROWS)
        recipe = recipe.with_value(FIELD.logging_steps, every, (
            f"one progress row every {every} optimizer step{'s' if every > 1 else ''}: {steps // every} rows over the "
            f"{steps} steps (the diagnosis calls a trend from {MIN_LOGGED_ROWS}, and the live guard reads each row)"),
            "plan")
    if {FIELD.save_steps, FIELD.save_strategy} & set(overrides):
        return recipe
    if steps and steps < KEEP_FROM_STEPS:
        return recipe  # TRL's default saves at the last step; a short run is cheaper to rerun than to checkpoint often
    every = max(1, math.ceil(steps / CHECKPOINTS_PER_RUN)) if steps else 100
    reason = (f"a checkpoint every {every} steps ({CHECKPOINTS_PER_RUN} over the run)" if steps else
              f"a checkpoint every {every} steps (the run's length is unknown here)")
    return recipe.with_values(
        {FIELD.save_strategy: "steps", FIELD.save_steps: every, FIELD.save_total_limit: KEPT_CHECKPOINTS},
        {FIELD.save_steps: reason + ": a crash or a preemption costs at most that many, and resume_training continues "
                                "from the last one with its optimizer state",
         FIELD.save_strategy: "checkpoints by step (save_steps)",
         FIELD.save_total_limit: f"keep the last {KEPT_CHECKPOINTS}: a full fine-tune's checkpoint holds weights and "
                             "AdamW state (16 bytes a parameter); resume after a guard stop goes back past its step"},
        "plan")

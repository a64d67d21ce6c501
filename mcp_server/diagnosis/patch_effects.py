"""What else a patch changes, beside what its finding targets: every patch states it (issue 34). A patch that
doubles num_generations and steps_per_generation finds more rare successes, and also makes an on-policy run
off-policy and halves the prompts per optimizer step; an agent applying it must know both.

The generation structure is TRL 1.16's (trl/trainer/grpo_config.py, __post_init__): steps_per_generation defaults
to gradient_accumulation_steps, or generation_batch_size / (per_device_train_batch_size x processes); one
generation batch feeds steps_per_generation / gradient_accumulation_steps optimizer steps, num_iterations times
over. A run is on-policy when that is one optimizer step per generation.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_server.config import FIELD
from mcp_server.diagnosis.context import Ctx


@dataclass(frozen=True)
class Structure:
    prompts_per_step: float  # prompts per optimizer step, over all processes
    completions_per_generation: int  # the generation batch, over all processes
    updates_per_generation: float  # optimizer steps each generation batch feeds (1: on-policy)


def _int(value, fallback: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else fallback


def structure(ctx: Ctx, values: dict) -> Structure:
    """The generation structure of the run's config with `values` over it (TRL's defaults where unset)."""

    def get(key: str) -> int:  # the patch's value, else the run's, else TRL's default (Ctx.get); 1 if unusable
        return _int(values[key], 1) if key in values else _int(ctx.get(key), 1)

    processes = ctx.run.request.num_gpus
    per_device, accumulation = get("per_device_train_batch_size"), get("gradient_accumulation_steps")
    generations, iterations = get("num_generations"), get("num_iterations")
    batch = values.get(FIELD.generation_batch_size, ctx.config.get(FIELD.generation_batch_size))
    per_generation = values.get(FIELD.steps_per_generation, ctx.config.get(FIELD.steps_per_generation))
    if FIELD.steps_per_generation in values:
        batch = None  # TRL takes one of the two: the patch's
    if isinstance(per_generation, int) and per_generation > 0:
        steps = per_generation
    elif isinstance(batch, int) and batch > 0:
        steps = max(1, batch // (per_device * processes))
    else:
        steps = accumulation
    return Structure(prompts_per_step=per_device * processes * accumulation / generations,
                     completions_per_generation=per_device * processes * steps,
                     updates_per_generation=steps / accumulation * iterations)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def patch_changes(ctx: Ctx, patch: dict) -> list[str]:
    """The side effects of merging `patch` into the run's config, one sentence each (empty: none beyond its
    target)."""
    if not patch:
        return []
    out = []
    before, after = structure(ctx, {}), structure(ctx, patch)
    if before.updates_per_generation <= 1 < after.updates_per_generation:
        out.append(f"makes the run off-policy: each generation batch now feeds {after.updates_per_generation:g} "
                   "optimizer steps, so all but the first train on completions an older policy sampled (the clip "
                   "and importance ratios start to act)")
    elif before.updates_per_generation > 1 >= after.updates_per_generation:
        out.append(f"makes the run on-policy (was {before.updates_per_generation:g} optimizer steps per generation "
                   "batch): one generation per step, more generation time per step")
    elif before.updates_per_generation != after.updates_per_generation:
        out.append(f"optimizer steps per generation batch {before.updates_per_generation:g} -> "
                   f"{after.updates_per_generation:g}")
    if before.prompts_per_step != after.prompts_per_step:
        out.append(f"prompts per optimizer step {before.prompts_per_step:g} -> {after.prompts_per_step:g}"
                   + (" (a noisier gradient over fewer prompts)" if after.prompts_per_step < before.prompts_per_step
                      else ""))
    if before.completions_per_generation != after.completions_per_generation:
        out.append(f"completions per generation batch {before.completions_per_generation} -> "
                   f"{after.completions_per_generation} (generation time and the reward's calls scale with it)")
    length_before, length_after = _number(ctx.view.max_completion_length), _number(
        patch.get(FIELD.max_completion_length))
    if length_after and length_before and length_after > length_before:
        out.append(f"completions up to {length_after / length_before:g}x longer: activation memory and generation "
                   "time per step grow with them (check plan_memory)")
    beta_before, beta_after = _number(ctx.get(FIELD.beta)) or 0.0, _number(patch.get(FIELD.beta))
    if beta_after is not None and beta_before == 0 < beta_after:
        out.append("beta above 0 loads a reference model: one more copy of the weights in memory, one more "
                   "forward pass per step")
    lr_before, lr_after = ctx.learning_rate[0], _number(patch.get(FIELD.learning_rate))
    if lr_before and lr_after and lr_after < lr_before:
        out.append(f"updates {lr_before / lr_after:.3g}x smaller: the run needs more steps to learn as much")
    if patch.get(FIELD.mask_truncated_completions) is True and not ctx.get(FIELD.mask_truncated_completions):
        out.append("truncated completions leave the loss: fewer tokens train per step, and a run that is all "
                   "truncated trains on nothing")
    if FIELD.loss_type in patch and patch[FIELD.loss_type] != ctx.get(FIELD.loss_type):
        out.append(f"loss_type {ctx.get(FIELD.loss_type)} -> {patch[FIELD.loss_type]}: another normalisation of the "
                   "loss over tokens and sequences")
    return out

"""The emitted config fitted to its target by the memory plan: when the recipe does not fit the GPU (or leaves under
10% headroom), the plan's recommended levers are applied and each changed value says why. A set that changes the
fine-tuning mode (LoRA, QLoRA) is the person's choice, never applied: validation then says plainly it does not fit."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from mcp_server.config import FIELD
from mcp_server.config.recipe import Recipe
from mcp_server.config.target import Target
from mcp_server.errors import UserInputError
from mcp_server.memory.models import MemoryPlan
from mcp_server.memory.levers import just_enough_vllm
from mcp_server.memory.params import count_params
from mcp_server.memory.settings import RunSettings
from mcp_server.memory import planner
from mcp_server.memory.planner import architecture_of
from mcp_server.memory.estimate import step_estimate
from mcp_server.recipe.runspec import RunSpec

NOT_APPLIED = {"lora", "qlora"}  # a change of fine-tuning mode is asked for, not applied


def plan_for(values: dict, gpu: str, num_gpus: int, dynamic_sampling: dict | None = None) -> MemoryPlan | None:
    """The memory plan of the values on the target, or None when it cannot be planned offline. `dynamic_sampling`:
    the run's option (train/dynamic_sampling.json), which the plan counts as validation's and the launch's do."""
    try:
        return planner.plan(RunSpec(values=values, target=Target(gpu, num_gpus),
                                    dynamic_sampling=dict(dynamic_sampling) if dynamic_sampling else None))
    except UserInputError:
        return None


Planner = Callable[[dict], MemoryPlan | None]  # the memory plan of a config's values on the run's target


def fit_to_target(recipe: Recipe, plan_of: Planner, num_gpus: int, overridden: set[str]) -> Recipe:
    """The recipe with the plan's recommended levers applied when the run does not fit or is tight."""
    plan = plan_of(recipe.values)
    for _ in range(2):  # a set that only just fits may leave a cheaper lever that restores the 10% headroom
        if plan is None or plan.status == "fits" or plan.recommended is None:
            return recipe
        applied = _apply(plan, recipe, num_gpus, overridden)
        if applied is None:
            return recipe
        recipe = applied
        plan = plan_of(recipe.values)
    return recipe


def _apply(plan: MemoryPlan, recipe: Recipe, num_gpus: int, overridden: set[str]) -> Recipe | None:
    chosen = plan.recommended
    if NOT_APPLIED & set(chosen.levers) or overridden & set(chosen.patch):
        return None
    described = {lever.name: lever.description for lever in plan.levers}
    before = f"{plan.peak_gib:.1f}"
    why = {}
    for name in chosen.levers:
        lever_patch = next((lv.patch for lv in plan.levers if lv.name == name), {})
        for key in lever_patch:
            why[key] = (f"memory plan for {num_gpus}x {plan.gpu}: {described.get(name, name)} Without the levers "
                        f"{', '.join(chosen.levers)} the planned peak is {before} GiB of {plan.capacity_gib:.1f}, with "
                        f"them {chosen.peak_gib:.1f} GiB")
    return recipe.with_values(chosen.patch, why, "plan")


def launch_text(plan: MemoryPlan | None, run_dir) -> tuple[str, str]:
    """(the command, the config header's line) that start the run as the plan lays it out: one process runs train.py
    itself; several GPUs go through launch_training, which writes train/launch.sh (accelerate with the plan's
    sharding, and `trl vllm-serve` on its own GPUs in server mode)."""
    single = f"cd {run_dir} && python train/train.py --config train/config.yaml"
    if plan is None or plan.launch.training_processes <= 1 and plan.launch.vllm_server is None:
        return single, "python train/train.py --config train/config.yaml"
    launch = plan.launch
    layout = {"ddp": "DDP", "fsdp": "FSDP"}.get(launch.strategy, f"DeepSpeed ZeRO-{launch.zero_stage}")
    how = f"accelerate launch, {layout} over {launch.training_processes} training GPU(s)"
    if launch.vllm_server:
        server = launch.vllm_server
        how += (f", `trl vllm-serve` on {server.gpus} GPU(s) (tensor parallel {server.tensor_parallel_size}, "
                f"--gpu_memory_utilization {server.gpu_memory_utilization:g})")
    line = f"llm-finetuning launch-training {run_dir}  # {how}; it writes train/launch.sh, which also runs by hand"
    return line, f"llm-finetuning launch-training <this run>  ({how}; not `python train/train.py`: one process)"


def model_size_b(model: str, target: str | None = None) -> float | None:
    """The model's parameters in billions (local config.json, the catalog, the hub cache or a known family), None
    when unknown. For a GPU `target` ('2x A10G') an unknown architecture is refused: the emitter never writes a
    layout (precision, offload, sharding) the memory plan has not checked."""
    try:
        _, arch = architecture_of(model)
    except UserInputError as exc:
        if target is None:
            return None
        raise UserInputError("model", f"cannot plan memory for '{model}' on {target}, so its layout (full "
                             "fine-tune, float32 master weights, offload or not, the GPUs' sharding) would be "
                             f"written unchecked: {str(exc).removeprefix(f'{exc.field}: ')} Give a local directory "
                             "with a complete config.json, download the config once (`hf download <model> "
                             "config.json`), or use a catalog name (references/model-catalog.md)") from None
    return count_params(arch).total / 1e9


def grow_vllm_share(recipe: Recipe, plan_of: Planner, request) -> Recipe:
    """A colocated vLLM whose share leaves KV cache for only part of a generation round batches it slowly: grow the
    share toward one that holds the whole round (levers.just_enough_vllm), as far as the plan still fits with 10%
    headroom."""
    plan, given = plan_of(recipe.values), recipe.given
    if (plan is None or plan.status != "fits" or not given.use_vllm or given.vllm_mode != "colocate"
            or FIELD.vllm_gpu_memory_utilization in request.overrides):
        return recipe
    settings = RunSettings.reported(plan.run)
    now = settings.vllm_gpu_memory_utilization
    full = just_enough_vllm(plan.architecture, plan.params, settings, plan.capacity_gib,
                            settings.vllm_tensor_parallel_size)
    share, grown = full, None
    while share > now + 0.02:
        grown = plan_of({**recipe.values, "vllm_gpu_memory_utilization": share})
        if grown is not None and grown.status == "fits":
            break
        share, grown = round(share - 0.05, 2), None
    if grown is None:
        return recipe
    held = "the whole generation round's" if share >= full else "more of the generation round's"
    return recipe.with_value(FIELD.vllm_gpu_memory_utilization, share, (
        f"memory plan for {request.num_gpus}x {plan.gpu}: {share:.2f} of the GPU (TRL's default 0.3 leaves vLLM's KV "
        f"cache room for only part of a generation round, which it then batches slowly): its weights and {held} KV "
        f"cache, with 10% headroom (peak {grown.peak_gib:.1f} of {grown.capacity_gib:.1f} GiB)"), "plan")


CPU_REHEARSAL_S = 1800  # a CPU run longer than this gets the advice of a rehearsal that finishes


def cpu_time(spec: RunSpec, finetune: str, run_dir: Path | None = None) -> str | None:
    """On a CPU target, the planner's step estimate (memory.estimate, at the speed this machine measures now) times
    max_steps, and when that is over CPU_REHEARSAL_S, a rehearsal that finishes: the same run with LoRA, one
    micro-batch a step and the steps that fit, with its own estimate (issue 49: a full fine-tune of smollm2-135m,
    30 steps of 32 completions, took hours at 4-6 min a step, and emit said nothing of it). None off a CPU, or
    where no estimate can be made (no torch and no stored probe). `run_dir`: the run emitted, which keeps the
    readings the estimate stood on (the figure its launch and training_status give)."""
    if not spec.target.cpu:
        return None
    estimate = step_estimate(spec, keep_for=run_dir)
    steps = spec.fields.get(FIELD.max_steps)
    if estimate is None or not isinstance(steps, int) or steps <= 0:
        return estimate.text if estimate else None
    text = f"{estimate.text}; {steps} steps: about {_hours(estimate.step_s * steps)}"
    if estimate.step_s * steps <= CPU_REHEARSAL_S:
        return text
    changes = {FIELD.use_peft: True, FIELD.gradient_accumulation_steps: 1}
    smaller = step_estimate(dataclasses.replace(spec, values={**spec.values, **changes}))
    one = smaller.step_s if smaller else estimate.step_s
    fit = max(1, int(CPU_REHEARSAL_S // one))
    flags = " ".join([*(["--finetune lora"] if finetune != "lora" else []), *(
        ["--override gradient_accumulation_steps=1"] if spec.fields.get(FIELD.gradient_accumulation_steps, 1) != 1
        else []), f"--override max_steps={fit}"])
    return (text + f". Long for a CPU: a rehearsal that finishes, LoRA with one micro-batch a step, about "
            f"{_hours(one)} a step, {fit} step{'s' if fit != 1 else ''} in about {_hours(fit * one)}: emit again with "
            f"{flags} (a shorter max_completion_length, from sample_completions' length advice, shortens each)")


def _hours(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"

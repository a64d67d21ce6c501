"""plan_memory: will this GRPO run fit on the target GPUs, what to change if not, and how fast will it roll out.

The answer is assembled here from small modules, all arithmetic on the architecture and the run settings (no torch):
settings (the run's config read into RunSettings), components (one function per memory component),
breakdown (the components added up into the training and generation peaks), levers, anchors and speed.
See references/grpo-memory.md for every term and its source.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from mcp_server.config import FIELD
from mcp_server.errors import UserInputError
from mcp_server.gpus import lookup_gpu, resolve_target
from mcp_server.memory.anchors import size_class_anchor
from mcp_server.memory.constants import CUDA_CONTEXT_GIB, TIGHT_FRACTION
from mcp_server.memory.layout import choose_layout
from mcp_server.memory.levers import (
    LeverValidator,
    config_for_validation,
    default_rewards,
    inspected_completion_length,
    rank_levers,
)
from mcp_server.memory.lm_catalog import find_family, find_model, lookup_model
from mcp_server.memory.breakdown import Breakdown
from mcp_server.memory.models import LaunchLayout, Lever, MemoryComponent, MemoryPlan, MemoryPlanRequest
from mcp_server.memory.params import (Architecture, ParamCount, count_params, generic_layout_note,
                                      load_local_architecture)
from mcp_server.memory.settings import (
    RunSettings,
    Target,
    check_run_numbers,
    installed_trl_version,
    resolve_settings,
    trl_version_defaults,
)
from mcp_server.memory.speed import estimate_speed
from mcp_server.model_ref import TINY, cached_config_path, expand_built_in, model_config
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.recipe.runspec import RunSpec
from mcp_server.runs import Run

# CUDA_CONTEXT_GIB: tests take it off torch-measured peaks
__all__ = ["CUDA_CONTEXT_GIB", "architecture_of", "plan", "plan_memory"]


def expand_tiny_only(name: str) -> str:
    """'tiny' -> its directory (built on first use, in milliseconds); 'smollm2-135m' stays a name the catalog
    answers (HuggingFaceTB/SmolLM2-135M-Instruct's config), so planning never starts its minute-long conversion."""
    return expand_built_in(name) if name == TINY else name


def architecture_of(model: str | None, config: dict[str, Any] | None = None) -> tuple[str, Architecture]:
    """(model name, architecture) of `model`, else of the config's model_name_or_path: a local config.json
    (expand_tiny_only for 'tiny'), the catalog (where 'smollm2-135m' is HuggingFaceTB/SmolLM2-135M-Instruct's
    config, so planning never converts it), or a hub model's cached config.json (model_ref.cached_config_path).
    What cores call; the tool's request reads through resolve_architecture."""
    name = model or GRPOView.given(config or {}).model_name_or_path
    if not name:
        raise UserInputError("model", "give a model (catalog name, local directory or config.json), a config with "
                             "model_name_or_path, or the architecture numbers")
    name = expand_tiny_only(name)
    local = load_local_architecture(name)
    if local is not None:
        return name, local
    found = find_model(name)
    if found is not None:
        return found
    cached = cached_config_path(name)  # a hub model downloaded before: its config.json, read offline
    if cached is not None:
        return name, load_local_architecture(cached)
    family = find_family(name)  # a known family: its catalog model of the same size (the plan's notes say so)
    if family is not None:
        return name, family[1]
    return lookup_model(name)  # raises with the closest catalog names


@dataclass(frozen=True)
class PlanOptions:
    """What a plan is asked beside the run (RunSpec): the model and its architecture numbers where the config's
    model is not the one meant, the GPUs (a launch's count; a memory size for a GPU not in the catalog), settings
    given by hand (RunSettings names; they win over the config) and whether each lever is validated."""

    model: str | None = None
    architecture: Architecture | None = None
    gpu: str | None = None
    gpu_memory_gib: float | None = None
    num_gpus: int | None = None
    given: Mapping[str, Any] = field(default_factory=dict)
    validate_levers: bool = False


def resolve_architecture(options: PlanOptions, cfg: dict[str, Any]) -> tuple[str, Architecture]:
    """(model name, architecture) of a plan: the architecture numbers given, else architecture_of."""
    if options.architecture is not None:
        return options.model or "explicit", options.architecture
    return architecture_of(options.model, cfg)


def plan(spec: RunSpec, *, num_gpus: int | None = None, gpu_memory_gib: float | None = None,
         prompt_length: int | None = None, strategy: str | None = None, validate_levers: bool = False) -> MemoryPlan:
    """The memory plan of a run (recipe.runspec.RunSpec: its config, records and target) on its target, or on
    `num_gpus` of its GPU (a launch's GPUs): what the other cores call (plan_memory is the tool's door, which builds
    the spec from its request). None is 'not given': the planner's default. Levers are not re-validated one by one
    unless asked. A target over several nodes is planned as its GPUs pooled (config.target.Target.pooled)."""
    target = spec.target.pooled()
    given = {"vllm_server_gpus": target.vllm_server_gpus, "prompt_length": prompt_length, "strategy": strategy}
    return _plan(spec, PlanOptions(gpu=None if target.cpu else target.gpu, gpu_memory_gib=gpu_memory_gib,
                                   num_gpus=num_gpus or target.num_gpus, validate_levers=validate_levers,
                                   given={k: v for k, v in given.items() if v is not None}))


def request_spec(request: MemoryPlanRequest) -> RunSpec:
    """The run a plan_memory request names: its config_path (a YAML file or a run directory) with the records
    beside it, its config dict over that, or neither (the request's model and numbers alone)."""
    spec = RunSpec(values={})
    if request.config_path:
        path = Path(request.config_path).expanduser()
        if path.is_dir():
            path = Run(path).config if Run(path).config.exists() else path / "config.yaml"
        if not path.is_file():
            raise UserInputError("config_path",
                                 f"{request.config_path}: no such config (a YAML file or a run directory)")
        spec = RunSpec.read(path)
    return spec.with_values({**spec.fields, **(request.config or {})}) if request.config else spec


def family_assumption(name: str) -> str | None:
    """The note of a plan whose architecture came from the catalog model of the same family (find_family)."""
    if not name or load_local_architecture_quietly(name) or find_model(name) or cached_config_path(name):
        return None
    family = find_family(name)
    if family is None:
        return None
    return (f"architecture assumed from {family[0]} (same family and size; {name} has no config.json here, "
            "neither a local directory, the HF cache, nor the catalog): pass its config.json or architecture "
            "numbers if it differs")


def load_local_architecture_quietly(name: str) -> bool:
    try:
        return load_local_architecture(expand_tiny_only(name)) is not None
    except (UserInputError, ValueError):
        return True  # a local path (an unreadable one is reported where it is read)


def plan_target(options: PlanOptions, recipe: dict[str, Any], cfg: dict[str, Any]) -> Target:
    """The GPUs planned for: the options', else the run's recorded target; a bare memory size is accepted."""
    num_gpus = options.num_gpus or recipe.get("num_gpus") or cfg.get("num_gpus") or 1
    gpu_name = options.gpu or recipe.get("gpu") or cfg.get("gpu")
    if options.gpu_memory_gib:
        gpu = lookup_gpu(gpu_name) if gpu_name and str(gpu_name).lower() != "cpu" else None
        return Target(gpu_name=gpu.name if gpu else f"{options.gpu_memory_gib:g} GiB GPU",
                      capacity_gib=options.gpu_memory_gib, num_gpus=int(num_gpus), gpu=gpu)
    gpu, name = resolve_target(str(gpu_name or "H100"))
    if gpu is None:
        raise UserInputError("gpu", "memory planning is for GPUs; give a GPU type or gpu_memory_gib")
    return Target(gpu_name=name, capacity_gib=gpu.memory_gib, num_gpus=int(num_gpus), gpu=gpu)


class PlannedRun(NamedTuple):
    """A run read into what its plan is computed from: the run's layout chosen and its breakdown."""

    config: dict[str, Any]
    recipe: dict[str, Any]
    model: str
    arch: Architecture
    params: ParamCount
    target: Target
    settings: RunSettings
    breakdown: Breakdown
    launch: LaunchLayout
    unlaid: RunSettings  # the settings before choose_layout chose the sharding: what a patched config is read into


def planned_run(spec: RunSpec, options: PlanOptions) -> PlannedRun:
    """The run (`spec`) read into what its plan is computed from, under `options`."""
    config = spec.fields
    recipe = spec.request.fields_given()
    model, arch = resolve_architecture(options, config)
    target = plan_target(options, recipe, config)
    settings = resolve_settings(config, options.given, target)
    if settings.finetune == "full" and recipe.get("finetune") in ("lora", "qlora") and "finetune" not in options.given:
        settings = settings.updated({"finetune": recipe["finetune"]})
    params = count_params(arch)
    rewards = reward_model_shapes(config)
    if rewards:
        settings = settings.updated({"reward_models": rewards})
    rounds = (spec.dynamic_sampling or {}).get("max_extra_rounds")
    if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 0:  # else the validator's finding
        settings = settings.updated({"dynamic_sampling_rounds": rounds})
    check_run_numbers(settings, arch, target)
    unlaid = settings
    settings, breakdown, launch = choose_layout(arch, params, settings, target)
    return PlannedRun(config, recipe, model, arch, params, target, settings, breakdown, launch, unlaid)


def reward_model_names(config: dict[str, Any]) -> list[str]:
    """The config's model-based rewards: reward_model_name_or_path (TRL's grpo script appends it to reward_funcs) and
    each reward_funcs entry that names a model (GRPOTrainer loads a string it cannot import as a reward model)."""
    given = GRPOView.given(config)
    names = [given.reward_model_name_or_path] if given.reward_model_name_or_path else []
    for name in given.reward_funcs or []:
        if isinstance(name, str) and name not in names and _names_a_model(name):
            names.append(name)
    return names


def _names_a_model(name: str) -> bool:
    try:
        return load_local_architecture(name) is not None or find_model(name) is not None or bool(
            cached_config_path(name))
    except (UserInputError, ValueError, OSError):
        return False


def reward_model_shapes(config: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    """(parameters, hidden_size, intermediate_size, layers) of each model-based reward, read like the policy's
    architecture (a local config.json, the catalog, the HF cache); a sequence-classification head has one label, so
    the LM head is not loaded: its parameters are left out."""
    shapes = []
    for name in reward_model_names(config):
        _, arch = architecture_of(name)
        counted = count_params(arch)
        shapes.append((counted.total - counted.lm_head, arch.hidden_size, arch.intermediate_size,
                       arch.num_hidden_layers))
    return shapes


# what a plan_memory request says of the run or the target rather than of its settings
_NOT_SETTINGS = {"model", "architecture", "config_path", "config", "gpu", "gpu_memory_gib", "num_gpus",
                 "validate_levers"}


def plan_memory(request: MemoryPlanRequest) -> MemoryPlan:
    """The tool's door: the run its request names (request_spec), planned under its options (request_options)."""
    return _plan(request_spec(request), request_options(request))


def request_options(request: MemoryPlanRequest) -> PlanOptions:
    """A plan_memory request's options: the only reading of a MemoryPlanRequest past request_spec."""
    return PlanOptions(model=request.model, architecture=request.architecture, gpu=request.gpu,
                       gpu_memory_gib=request.gpu_memory_gib, num_gpus=request.num_gpus,
                       given=request.model_dump(exclude_none=True, exclude=_NOT_SETTINGS),
                       validate_levers=request.validate_levers)


def _lever_world(spec: RunSpec, options: PlanOptions):
    """The world a lever's patch is validated in: the run's target pooled over its nodes, with the server's GPUs
    the plan was asked for (plan_memory's vllm_server_gpus), never the default server's."""
    world, server = spec.target.pooled(), options.given.get("vllm_server_gpus")
    return world if server is None else dataclasses.replace(world, vllm_server_gpus=server)


def _plan(spec: RunSpec, options: PlanOptions) -> MemoryPlan:
    config, recipe, model, arch, params, target, settings, breakdown, launch, unlaid = planned_run(spec, options)
    capacity = target.capacity_gib
    status = _status(breakdown.peak, capacity) if not breakdown.problems else "does_not_fit"
    levers: list[Lever] = []
    recommended = None
    notes = list(breakdown.problems)
    if status != "fits":
        rewards = spec.rewards if config else [r.model_dump() for r in default_rewards()]
        validator = LeverValidator(config_for_validation(config, model, settings), rewards, target,
                                   options.validate_levers, world=_lever_world(spec, options))
        inspection, unread = inspected_completion_length(spec.base_dir)
        levers, recommended = rank_levers(arch, params, settings, target, breakdown, validator, inspection,
                                          unlaid=unlaid)
        if validator.base_errors:
            notes.append("the run's config is already invalid (" + "; ".join(sorted(validator.base_errors))
                         + "); levers are judged on the errors they add")
        notes += validator.notes + ([unread] if unread else [])
    notes += _notes(arch, settings, target, config, options)
    if breakdown.generation_peak_expandable and breakdown.generation_peak - breakdown.generation_peak_expandable > 0.5:
        notes.append(f"generation peak {breakdown.generation_peak:.1f} GiB planned under PyTorch's default caching "
                     "allocator (HF generate's growing KV cache leaves cached segments behind); with "
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which the emitted train/train.py sets, it is "
                     f"expected near {breakdown.generation_peak_expandable:.1f} GiB (not measured; `trl grpo --config` "
                     "does not set it, so the plan keeps the larger figure)")
    if status != "fits" and recommended is None:
        notes.append("No combination of levers fits this GPU: use a bigger GPU class, more GPUs, or a smaller model.")
    table = [MemoryComponent(name=name, gib=round(gib, 2), note=breakdown.notes.get(name, ""))
             for name, gib in breakdown.components.items() if gib > 0.005 or name in ("weights", "framework_overhead")]
    return MemoryPlan(
        model=model, architecture=arch, params=params, trainable_params=breakdown.trainable, gpu=target.gpu_name,
        capacity_gib=round(capacity, 2), num_gpus=target.num_gpus, training_gpus=breakdown.training_gpus,
        run=settings.model_dump(), breakdown=table, peak_phase=breakdown.peak_phase,
        training_peak_gib=round(breakdown.training_peak, 2), generation_peak_gib=round(breakdown.generation_peak, 2),
        peak_gib=round(breakdown.peak, 2), headroom_gib=round(capacity - breakdown.peak, 2), status=status,
        fits=breakdown.peak <= capacity and not breakdown.problems, server=breakdown.server, launch=launch,
        peak_allocated_gib=round(breakdown.peak_allocated, 2), peak_reserved_gib=round(breakdown.peak_reserved, 2),
        peak_nvidia_smi_gib=round(breakdown.peak, 2), assumptions=assumptions(settings, config, options),
        levers=levers,
        recommended=recommended, anchor=size_class_anchor(arch, params, settings),
        speed=estimate_speed(arch, params, settings, target, breakdown), notes=notes,
    )


def _status(peak: float, capacity: float) -> str:
    if peak > capacity:
        return "does_not_fit"
    return "tight" if capacity - peak < TIGHT_FRACTION * capacity else "fits"


def _notes(arch: Architecture, settings: RunSettings, target: Target, config: dict[str, Any],
           options: PlanOptions) -> list[str]:
    """The plan's assumptions and warnings."""
    notes = []
    name = options.model or GRPOView.given(config).model_name_or_path or ""
    assumed = family_assumption(name) if options.architecture is None else None
    if assumed:
        notes.append(assumed)
    try:
        local = model_config(expand_tiny_only(name)) if name and options.architecture is None else None
    except (OSError, ValueError):
        local = None  # an unreadable config.json: resolve_architecture said so already
    generic = generic_layout_note(local) if isinstance(local, dict) else None
    if generic:
        notes.append(generic)
    if not config:
        notes.append("no config given: the recipe's defaults (vLLM, 8 completions per device and per prompt, "
                     "4 accumulation steps, beta 0.01, bf16 where the GPU has it) under the fields you set")
    if not config and options.given.get("prompt_length") is None:
        notes.append(f"prompt length assumed {settings.prompt_length} tokens (TRL does not truncate prompts; "
                     "pass prompt_length)")
    if settings.dtype == "float32" and (not GRPOView.given(config).dtype and options.given.get("dtype") is None):
        notes.append("weights planned in float32: TRL loads in float32 unless dtype is set (dtype: bfloat16 halves "
                     "weights, gradients and optimizer state)")
    if target.gpu and not target.gpu.bf16 and settings.dtype == "bfloat16":
        notes.append(f"{target.gpu.name} has no bf16: use float16 or float32")
    if target.gpu and target.gpu.unified_memory:
        notes.append("unified memory: the OS and CPU processes share the same pool; keep extra headroom")
    if arch.is_moe and settings.finetune == "qlora":
        notes.append("MoE experts are fused 3-D tensors in transformers 5: bitsandbytes leaves them unquantized")
    if settings.finetune == "qlora" and settings.colocated_vllm:
        notes.append("colocated vLLM under QLoRA: TRL starts it with quantization='bitsandbytes' (the policy has "
                     "4-bit layers), so its linear weights are planned in NF4 like the policy's")
    elif settings.finetune == "qlora" and settings.vllm_server:
        notes.append("`trl vllm-serve` loads the model unquantized: its weights are planned at 2 bytes per parameter")
    if settings.trl_version:
        notes.append(f"the levers are checked by the installed TRL's rules, not TRL {settings.trl_version}'s: a field "
                     "only that release has (use_liger_loss before 0.25) shows as unknown")
    if arch.extra_params:
        notes.append(f"{arch.extra_params/1e6:.0f}M parameters outside the text decoder (vision tower) are loaded "
                     "and counted")
    if "paged" in settings.optim:
        notes.append("paged optimizer: under pressure its state moves to CPU, so the real peak can be lower than "
                     "planned")
    return notes


def assumptions(settings: RunSettings, config: dict[str, Any], options: PlanOptions) -> list[str]:
    """What the plan assumed instead of reading it from the config: TRL's defaults and what its trainer does."""
    given = {k for k, v in config.items() if v is not None} | set(options.given)
    version = settings.trl_version or installed_trl_version() or "not installed"
    out = [f"TRL {version}" + (" (installed)" if not settings.trl_version else " (as given)")]
    out += trl_version_defaults(settings.trl_version)[1]
    if not ({"dtype", "torch_dtype", "model_init_kwargs"} & given):
        out.append(f"weights loaded in {settings.dtype} (TRL loads float32 unless model_init_kwargs/dtype says "
                   "otherwise)")
    if settings.mixed_precision:
        out.append("bf16 mixed precision (TRL's default bf16=True on GPUs that have it): activations 16-bit")
    if settings.fused_logits:
        out.append("log-probs through TRL's fused LM head (add_fused_lm_head in the installed TRL): no full logits")
    elif not settings.use_liger_kernel:
        why = (" (accelerate's bf16 autocast returns the model's outputs in fp32)"
               if settings.mixed_precision and settings.logits_dtype_bytes == 4 else "")
        out.append(f"full logits of the completion tokens in {8 * settings.logits_dtype_bytes}-bit{why}, kept for "
                   "the log-softmax backward")
    if settings.beta != 0:
        out.append(f"beta={settings.beta:g}: " + ("the reference is the base with adapters disabled (no copy)"
                                                 if settings.peft else "a frozen reference model in the load dtype"))
    else:
        out.append("beta=0: no reference model")
    if not {FIELD.gradient_checkpointing, GRPOView.ALIASES.get(FIELD.gradient_checkpointing)} & given:  # either name
        out.append(f"gradient_checkpointing={settings.gradient_checkpointing} (TRL's default)")
    if not settings.use_vllm:
        sequences = settings.per_device_train_batch_size * (1 if settings.generate_per_micro_step else settings.spg)
        out.append(f"HF generate: {sequences} sequences per generation round per GPU (per_device_train_batch_size x "
                   + ("1 in this TRL)" if settings.generate_per_micro_step else "steps_per_generation)"))
    if settings.vllm_server:
        out.append(f"`trl vllm-serve` on {settings.vllm_server_gpus} GPU(s) at --gpu_memory_utilization "
                   f"{settings.vllm_server_gpu_memory_utilization:g} (vllm-serve's default 0.9 unless given; the "
                   "config's vllm_gpu_memory_utilization is for colocate mode)")
    if "prompt_length" not in given and not config.get("max_prompt_length"):
        out.append(f"prompts of {settings.prompt_length} tokens (pass prompt_length: the longest prompt)")
    return out

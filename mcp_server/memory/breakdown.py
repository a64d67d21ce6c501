"""The components added up, per training GPU, into the peak of each phase:
  training   = weights + reference + optimizer state + gradients/activations/logits (+ vLLM if colocated)
  generation = weights + reference + optimizer state + KV cache (HF generate) or the whole vLLM share
plus the CUDA context and allocator slack (see references/grpo-memory.md)."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel

from mcp_server.memory import components
from mcp_server.memory.constants import GIB, VLLM_RUNTIME_GIB, VLLM_SLEEP_RESIDUAL_GIB
from mcp_server.memory.models import ServerGPUPlan
from mcp_server.memory.params import Architecture, ParamCount
from mcp_server.memory.settings import RunSettings, Target


class Breakdown(BaseModel):
    components: dict[str, float]  # GiB at the peak phase
    notes: dict[str, str]
    training_peak: float
    generation_peak: float
    peak: float  # nvidia-smi: what must fit the GPU
    peak_allocated: float  # torch.cuda.max_memory_allocated at the peak phase
    peak_reserved: float  # torch.cuda.max_memory_reserved at the peak phase
    peak_phase: str
    training_gpus: int
    trainable: int
    vllm_kv_gib: float = 0.0
    vllm_weights_gib: float = 0.0
    server: ServerGPUPlan | None = None
    problems: list[str] = []


class Fit(NamedTuple):
    """What the lever search needs of a breakdown: the peak (nvidia-smi GiB) and the layout's problems."""

    peak: float
    problems: list[str]


def compute_breakdown(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target) -> Breakdown:
    return _compute(arch, params, settings, target, with_table=True)


def compute_fit(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target) -> Fit:
    """compute_breakdown's peak and problems alone, without the table (the lever search tries ~100 sets a plan)."""
    return _compute(arch, params, settings, target, with_table=False)


def _compute(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target,
             with_table: bool) -> Breakdown | Fit:
    layout = components.gpu_layout(settings, target)
    problems = list(layout.problems)
    notes: dict[str, str] = {}

    trainable = components.trainable_params(arch, params, settings)
    weights = components.weights(params, settings, layout, trainable)
    gradients = components.gradients(settings, layout, trainable)
    optimizer = components.optimizer_state(settings, layout, trainable)
    reference = components.reference_model(params, settings, layout)
    activations = components.activations(arch, settings, layout)
    logits = components.logits(arch, settings, layout)
    gathered = components.gathered_layers(arch, params, layout)
    for name, part in (("weights", weights), ("optimizer_state", optimizer), ("reference_model", reference),
                       ("activations", activations), ("logits", logits)):
        if part.note:
            notes[name] = part.note

    # gradients live with activations when accumulating; with one micro-step they replace them layer by layer
    gradients_beside_activations = settings.gradient_accumulation_steps > 1 or settings.peft
    temporary = components.gradient_temporary(arch, params, settings, layout)
    casts = components.autocast_weight_copies(arch, params, settings, layout)
    # mid-backward (activations, logits, the weights' 16-bit copies) or its end (all gradients + the last fresh one)
    forward_backward = activations.bytes + logits.bytes + casts.bytes
    end_of_backward = gradients + temporary.bytes
    if gradients_beside_activations:
        per_step = gradients + max(forward_backward, temporary.bytes)
    else:
        per_step = max(end_of_backward, forward_backward)
    allocated_once = weights.bytes + reference.bytes + optimizer.bytes + gathered
    sync_gather = components.peft_sync_gather(params, settings, layout, weights)

    # the two phases, each as (allocated once, allocated per step)
    vllm_weights = vllm_kv_cache = 0.0
    generation_kv_cache = 0.0
    server = None
    if settings.colocated_vllm:
        vllm = components.colocated_vllm(params, settings, target, arch)
        vllm_weights, vllm_kv_cache = vllm.weights, vllm.kv_cache
        if vllm.problem:
            problems.append(vllm.problem)
        kind = "NF4 (bitsandbytes, as TRL starts it under QLoRA)" if settings.finetune == "qlora" else "bf16"
        notes["vllm_weights"] = (f"{kind} weights / tensor parallel {settings.vllm_tensor_parallel_size}; its "
                                 f"{VLLM_RUNTIME_GIB:g} GiB runtime is in the overhead")
        notes["vllm_kv_cache"] = (f"the rest of vllm_gpu_memory_utilization={settings.vllm_gpu_memory_utilization:g} "
                                  "of the GPU, preallocated by vLLM")
        vllm_in_training = VLLM_SLEEP_RESIDUAL_GIB * GIB if settings.vllm_enable_sleep_mode else vllm.total
        training_phase = (allocated_once + vllm_in_training, per_step)
        # the weight sync wakes only vLLM's weights (sleep mode), then generation holds its whole share
        vllm_at_sync = vllm.weights + VLLM_SLEEP_RESIDUAL_GIB * GIB if settings.vllm_enable_sleep_mode else vllm.total
        generation_phase = (allocated_once + max(vllm.total, vllm_at_sync + sync_gather.bytes), 0.0)
    elif settings.vllm_server:
        server, vllm_kv_cache, problem = components.vllm_server(params, settings, layout, target)
        if problem:
            problems.append(problem)
        training_phase = (allocated_once, per_step)
        generation_phase = (allocated_once + sync_gather.bytes, 0.0)
    else:
        generation_kv_cache = components.generation_kv_cache(arch, settings, layout)
        # ZeRO-3/FSDP gathers the whole model for generate
        gathered_for_generate = (params.total * 2 - weights.bytes) if layout.fully_sharded else 0.0
        training_phase = (allocated_once, per_step)
        # after generate, the no-grad reference / old log-prob forwards (full logits in older TRL)
        after_generate = max(generation_kv_cache, components.reference_logits(arch, settings))
        if after_generate > generation_kv_cache:
            notes["generation_kv_cache"] = "the no-grad reference/old log-prob forward's full logits after generate"
            generation_kv_cache = after_generate
        generation_phase = (allocated_once + max(gathered_for_generate, 0.0), after_generate)

    training = components.phase_peak(*training_phase)
    generation = components.phase_peak(*generation_phase)
    training_peak, generation_peak = training.nvidia_smi, generation.nvidia_smi
    if not with_table:
        return Fit(max(training_peak, generation_peak), problems)
    phase = "training" if training_peak >= generation_peak else "generation"
    at_peak = training if phase == "training" else generation
    in_training = phase == "training"
    table = {
        "weights": weights.bytes / GIB,
        "gradients": (gradients if in_training else 0.0) / GIB,
        "optimizer_state": optimizer.bytes / GIB,
        "reference_model": reference.bytes / GIB,
        "activations": (activations.bytes if in_training else 0.0) / GIB,
        "logits": (logits.bytes if in_training else 0.0) / GIB,
        "autocast_weight_copies": (casts.bytes if in_training else 0.0) / GIB,
        "gradient_temporary": 0.0,
        "generation_kv_cache": (generation_kv_cache if not in_training else 0.0) / GIB,
        "gathered_for_weight_sync": 0.0,
        "vllm_weights": 0.0,
        "vllm_kv_cache": 0.0,
    }
    if layout.fully_sharded:
        table["weights"] += gathered / GIB
        notes["weights"] += f"; sharded over {layout.training_gpus} GPUs + gathered layers"
    if settings.gradient_accumulation_steps > 1 and not settings.peft:
        notes["gradients"] = (f"held across {settings.gradient_accumulation_steps} accumulation micro-steps, "
                              "beside the activations")
    for name, part in (("autocast_weight_copies", casts), ("gradient_temporary", temporary)):
        if part.note:
            notes[name] = part.note
    at_end_of_backward = end_of_backward > forward_backward if not gradients_beside_activations else \
        temporary.bytes > forward_backward
    if in_training and at_end_of_backward:
        table["activations"] = table["logits"] = table["autocast_weight_copies"] = 0.0
        table["gradient_temporary"] = temporary.bytes / GIB
        if not gradients_beside_activations:
            notes["gradients"] = "one micro-step: the full gradients outgrow the activations they replace"
    elif in_training and not gradients_beside_activations:
        table["gradients"] = 0.0
        notes["gradients"] = "one micro-step: gradients fill in as activations are freed (peak is the activations)"
    at_sync = not in_training and sync_gather.bytes > 0 and (
        not settings.colocated_vllm or vllm_at_sync + sync_gather.bytes > vllm.total)
    if at_sync:
        table["gathered_for_weight_sync"] = sync_gather.bytes / GIB
        notes["gathered_for_weight_sync"] = sync_gather.note
    if settings.colocated_vllm and at_sync and settings.vllm_enable_sleep_mode:
        table["vllm_weights"] = vllm_at_sync / GIB
        notes["vllm_weights"] = "woken for the weight sync; the KV cache still asleep"
    elif settings.colocated_vllm:
        if not in_training or not settings.vllm_enable_sleep_mode:
            table["vllm_weights"], table["vllm_kv_cache"] = vllm_weights / GIB, max(vllm_kv_cache, 0) / GIB
        else:
            table["vllm_weights"] = VLLM_SLEEP_RESIDUAL_GIB
            notes["vllm_weights"] = "sleeping: weights offloaded and KV cache released while training"
    # what is left to the phase's peak: CUDA context, allocator slack, vLLM's runtime, gathered ZeRO-3 layers
    table["framework_overhead"] = (training_peak if in_training else generation_peak) - sum(table.values())
    notes["framework_overhead"] = components.OVERHEAD_NOTE
    return Breakdown(
        components={k: round(v, 3) for k, v in table.items()}, notes=notes, training_peak=training_peak,
        generation_peak=generation_peak, peak=max(training_peak, generation_peak), peak_allocated=at_peak.allocated,
        peak_reserved=at_peak.reserved, peak_phase=phase,
        training_gpus=layout.training_gpus, trainable=trainable, vllm_kv_gib=vllm_kv_cache / GIB,
        vllm_weights_gib=vllm_weights / GIB, server=server, problems=problems,
    )

"""The components added up, per training GPU, into the peak of each phase:
  training   = weights + reference + optimizer state + gradients/activations/logits (+ vLLM if colocated)
  generation = weights + reference + optimizer state + KV cache (HF generate) or the whole vLLM share
plus the CUDA context and allocator slack (see references/grpo-memory.md)."""

from __future__ import annotations

import math
from typing import NamedTuple

from pydantic import BaseModel

from mcp_server.config import FIELD
from mcp_server.memory import components, generation
from mcp_server.memory.constants import GIB, VLLM_RUNTIME_GIB, VLLM_SLEEP_RESIDUAL_GIB
from mcp_server.memory.models import ServerGPUPlan
from mcp_server.memory.params import Architecture, ParamCount
from mcp_server.errors import UserInputError
from mcp_server.memory.settings import RunSettings, Target, check_run_numbers, read_config


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
    generation_peak_expandable: float = 0.0  # HF generate: the generation peak with expandable segments


_STAGES = {"single": 0, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 0}


def with_strategy(settings: RunSettings, strategy: str) -> RunSettings:
    return settings.updated({"strategy": strategy, "zero_stage": _STAGES[strategy], "fsdp": strategy == "fsdp"})


def layout_order(settings: RunSettings, target: Target) -> list[str]:
    """The shardings layout.choose_layout tries, in order, for settings whose layout is not chosen yet: the first
    that fits is the run's (the last when none does)."""
    if settings.training_processes(target.num_gpus) == 1:
        return ["single"]
    if settings.strategy not in ("auto", "single"):
        return [settings.strategy]  # the config's deepspeed/fsdp, or a strategy chosen by hand
    if settings.finetune == "qlora":
        return ["ddp"]  # DeepSpeed and 4-bit bases do not mix well
    return ["ddp", "zero3"] if settings.peft else ["zero2", "zero3"]


class Fit(NamedTuple):
    """What the lever search needs of a breakdown: the peak (nvidia-smi GiB) and the layout's problems."""

    peak: float
    problems: list[str]
    refused: str = ""  # why the planner refuses the patched run (settings.check_run_numbers): no peak to report


class _Parts(NamedTuple):
    """The components of one run and what each training step holds at once."""

    layout: components.Layout
    trainable: int
    weights: components.Part
    gradients: float
    optimizer: components.Part
    reference: components.Part
    activations: components.Part
    logits: components.Part
    gathered: float
    temporary: components.Part
    casts: components.Part
    sync_gather: components.Part
    rewards: components.Part  # reward models loaded beside the policy
    beside: bool  # gradients live beside the activations (accumulating, or LoRA)
    forward_backward: float  # mid-backward: activations, logits, the weights' 16-bit copies
    end_of_backward: float  # all gradients + the last fresh one
    per_step: float
    allocated_once: float


class _Phases(NamedTuple):
    """The two phases' peaks and what the vLLM layout (or HF generate) adds to them."""

    training: components.Peak
    generation: components.Peak
    problems: list[str]
    vllm: components.ColocatedVLLM | None = None
    vllm_at_sync: float = 0.0
    server: ServerGPUPlan | None = None
    vllm_kv_cache: float = 0.0
    generate: generation.GenerationPhase | None = None  # HF generate on the training GPUs
    expandable_generation: float = 0.0  # its nvidia-smi GiB with expandable segments


def compute_breakdown(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target) -> Breakdown:
    parts = _parts(arch, params, settings, target)
    phases = _phases(arch, params, settings, target, parts)
    training_peak, generation_peak = phases.training.nvidia_smi, phases.generation.nvidia_smi
    in_training = training_peak >= generation_peak
    at_peak = phases.training if in_training else phases.generation
    table, notes = _table(settings, parts, phases, in_training)
    vllm_weights = phases.vllm.weights if phases.vllm else 0.0
    return Breakdown(
        components={k: round(v, 3) for k, v in table.items()}, notes=notes, training_peak=training_peak,
        generation_peak=generation_peak, peak=max(training_peak, generation_peak), peak_allocated=at_peak.allocated,
        peak_reserved=at_peak.reserved, peak_phase="training" if in_training else "generation",
        training_gpus=parts.layout.training_gpus, trainable=parts.trainable, vllm_kv_gib=phases.vllm_kv_cache / GIB,
        vllm_weights_gib=vllm_weights / GIB, server=phases.server, problems=phases.problems,
        generation_peak_expandable=phases.expandable_generation,
    )


# The settings only the colocated vLLM's share reads (components.colocated_vllm, in _phases): the training side's
# components (_parts) never read them.
VLLM_SHARE_FIELDS = frozenset({FIELD.vllm_gpu_memory_utilization, FIELD.vllm_enable_sleep_mode,
                               FIELD.vllm_max_model_length, FIELD.vllm_tensor_parallel_size})


# The settings FitCache.floor reads (settings.colocated_vllm and components.colocated_vllm); test_memory_search
# records the fields it reads. RunSettings names its fields as TRL does; finetune and prompt_length are its own.
COLOCATED_VLLM_FIELDS = frozenset({FIELD.use_vllm, FIELD.vllm_mode, FIELD.vllm_gpu_memory_utilization, "finetune",
                                   FIELD.vllm_tensor_parallel_size, FIELD.vllm_max_model_length, "prompt_length",
                                   FIELD.max_completion_length})


class FitCache:
    """compute_breakdown's peak and problems alone (no table, no notes) for many config patches of one run (the lever
    search tries a few hundred sets), each planned as the planner plans the patched config: the run's numbers checked
    (check_run_numbers) and its sharding chosen again (layout_order), from `settings` as read before the plan chose
    its layout. Each distinct patch is fitted once, and patches that differ only in VLLM_SHARE_FIELDS share the
    training side's components."""

    def __init__(self, arch: Architecture, params: ParamCount, settings: RunSettings, target: Target):
        self.arch, self.params, self.settings, self.target = arch, params, settings, target
        self._fits: dict[tuple, Fit] = {}
        self._parts: dict[tuple, _Parts] = {}

    def fit(self, patch: dict) -> Fit:
        # keyed by the settings the patch sets: sets whose levers merge alike (in any order) share one fit
        update = read_config(patch)
        items = _settings_key(update)
        fit = self._fits.get(items)
        if fit is None:
            fit = self._fits[items] = self._fit(self.settings.updated(update), items, update)
        return fit

    def _fit(self, settings: RunSettings, items: frozenset, update: dict) -> Fit:
        try:
            check_run_numbers(settings, self.arch, self.target)
        except UserInputError as exc:
            return Fit(math.inf, [str(exc)], refused=str(exc))
        training_key = items if VLLM_SHARE_FIELDS.isdisjoint(update) else frozenset(
            [item for item in items if item[0] not in VLLM_SHARE_FIELDS])
        for strategy in layout_order(settings, self.target):  # as layout.choose_layout: the first that fits
            run = with_strategy(settings, strategy) if strategy != "single" else settings
            parts = self._parts.get((training_key, strategy))
            if parts is None:
                parts = self._parts[(training_key, strategy)] = _parts(self.arch, self.params, run, self.target)
            phases = _phases(self.arch, self.params, run, self.target, parts)
            fit = Fit(max(phases.training.nvidia_smi, phases.generation.nvidia_smi), phases.problems)
            if fit.peak <= self.target.capacity_gib and not fit.problems:
                break
        return fit

    def floor(self, patch: dict) -> Fit:
        """A floor under fit(patch) from the colocated vLLM's share alone. The generation phase holds the whole
        share on top of what training allocates once (_phases), so the peak is at least the share plus the CUDA
        context, and a share that cannot start is a problem of the fit too. It reads only COLOCATED_VLLM_FIELDS of
        the settings. Without a colocated vLLM: no floor (0 GiB, no problems)."""
        settings = self.settings.patched(patch)
        if not settings.colocated_vllm:
            return Fit(0.0, [])
        vllm = components.colocated_vllm(self.params, settings, self.target, self.arch)
        return Fit(components.phase_peak(vllm.total, 0.0).nvidia_smi, [vllm.problem] if vllm.problem else [])


def _settings_key(update: dict) -> frozenset:
    """Settings fields as a hashable key: the set of (name, type, value) (True and 1 stay apart); an unhashable
    value (a list) by its repr. A frozenset hashes its items once and keeps its hash (the search looks a key up
    once or twice)."""
    try:
        return frozenset([(name, type(value), value) for name, value in update.items()])
    except TypeError:
        return frozenset([(name, type(value), repr(value)) for name, value in update.items()])


def _parts(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target) -> _Parts:
    layout = components.gpu_layout(settings, target)
    trainable = components.trainable_params(arch, params, settings)
    weights = components.weights(params, settings, layout, trainable)
    gradients = components.gradients(settings, layout, trainable)
    optimizer = components.optimizer_state(settings, layout, trainable)
    reference = components.reference_model(params, settings, layout)
    activations = components.activations(arch, settings, layout)
    logits = components.logits(arch, settings, layout)
    gathered = components.gathered_layers(arch, params, layout)
    # gradients live with activations when accumulating; with one micro-step they replace them layer by layer
    beside = settings.gradient_accumulation_steps > 1 or settings.peft
    temporary = components.gradient_temporary(arch, params, settings, layout)
    casts = components.autocast_weight_copies(arch, params, settings, layout)
    forward_backward = activations.bytes + logits.bytes + casts.bytes
    end_of_backward = gradients + temporary.bytes
    per_step = gradients + max(forward_backward, temporary.bytes) if beside else max(end_of_backward, forward_backward)
    rewards = generation.reward_model_weights(settings, layout)
    return _Parts(
        layout, trainable, weights, gradients, optimizer, reference, activations, logits, gathered, temporary, casts,
        components.peft_sync_gather(params, settings, layout, weights), rewards, beside, forward_backward,
        end_of_backward, per_step, allocated_once=weights.bytes + reference.bytes + optimizer.bytes + gathered
        + rewards.bytes,
    )


def _phases(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target, parts: _Parts) -> _Phases:
    """Each phase as (allocated once, allocated per step), by where generation runs: a colocated vLLM, a vLLM
    server on its own GPUs, or HF generate on the training GPUs."""
    problems = list(parts.layout.problems)
    once, per_step, sync = parts.allocated_once, parts.per_step, parts.sync_gather.bytes
    rewarding = generation.reward_forward(settings, parts.layout)  # reward models score the generation batch
    held = generation.dynamic_sampling_held(settings)  # earlier rounds' kept rows while the next one generates
    if settings.colocated_vllm:
        vllm = components.colocated_vllm(params, settings, target, arch)
        if vllm.problem:
            problems.append(vllm.problem)
        sleeping = VLLM_SLEEP_RESIDUAL_GIB * GIB
        vllm_in_training = sleeping if settings.vllm_enable_sleep_mode else vllm.total
        # the weight sync wakes only vLLM's weights (sleep mode), then generation holds its whole share
        at_sync = vllm.weights + sleeping if settings.vllm_enable_sleep_mode else vllm.total
        return _Phases(components.phase_peak(once + vllm_in_training, per_step),
                       components.phase_peak(once + held + max(vllm.total, at_sync + sync), rewarding), problems,
                       vllm=vllm, vllm_at_sync=at_sync, vllm_kv_cache=vllm.kv_cache)
    if settings.vllm_server:
        server, kv_cache, problem = components.vllm_server(params, settings, parts.layout, target)
        if problem:
            problems.append(problem)
        return _Phases(components.phase_peak(once, per_step), components.phase_peak(once + held + sync, rewarding),
                       problems,
                       server=server, vllm_kv_cache=kv_cache)
    gen = generation.generation_phase(arch, params, settings, parts.layout)
    # ZeRO-3/FSDP gathers the whole model for generate
    gathered_for_generate = (params.total * 2 - parts.weights.bytes) if parts.layout.fully_sharded else 0.0
    generating = once + held + max(gathered_for_generate, 0.0)
    return _Phases(components.phase_peak(once, per_step),
                   generation.generation_peak(generating, parts.optimizer.bytes, gen), problems, generate=gen,
                   expandable_generation=generation.generation_peak_expandable(generating, gen))


def _table(settings: RunSettings, parts: _Parts, phases: _Phases, in_training: bool) -> tuple[dict, dict]:
    """GiB per component at the peak phase, and how each was computed."""
    notes = {name: part.note for name, part in (
        ("weights", parts.weights), ("optimizer_state", parts.optimizer), ("reference_model", parts.reference),
        ("activations", parts.activations), ("logits", parts.logits), ("reward_models", parts.rewards)) if part.note}
    def training(value: float) -> float:  # held at the training peak only
        return value / GIB if in_training else 0.0

    table = {
        "weights": parts.weights.bytes / GIB, "gradients": training(parts.gradients),
        "optimizer_state": parts.optimizer.bytes / GIB, "reference_model": parts.reference.bytes / GIB,
        "activations": training(parts.activations.bytes), "logits": training(parts.logits.bytes),
        "autocast_weight_copies": training(parts.casts.bytes), "gradient_temporary": 0.0,
        "reward_models": parts.rewards.bytes / GIB, "generation_kv_cache": 0.0, "generation_activations": 0.0,
        "gathered_for_weight_sync": 0.0, "vllm_weights": 0.0, "vllm_kv_cache": 0.0,
    }
    if parts.layout.fully_sharded:
        table["weights"] += parts.gathered / GIB
        notes["weights"] += f"; sharded over {parts.layout.training_gpus} GPUs + gathered layers"
    if settings.gradient_accumulation_steps > 1 and not settings.peft:
        notes["gradients"] = (f"held across {settings.gradient_accumulation_steps} accumulation micro-steps, "
                              "beside the activations")
    for name, part in (("autocast_weight_copies", parts.casts), ("gradient_temporary", parts.temporary)):
        if part.note:
            notes[name] = part.note
    held = generation.dynamic_sampling_held(settings)
    if held and not in_training:
        table["dynamic_sampling_rounds"] = held / GIB
        notes["dynamic_sampling_rounds"] = generation.dynamic_sampling_note(settings)
    _backward_rows(table, notes, parts, in_training)
    _generate_rows(table, notes, settings, phases, in_training)
    _vllm_rows(table, notes, settings, parts, phases, in_training)
    # what is left to the phase's peak: CUDA context, allocator slack, vLLM's runtime, gathered ZeRO-3 layers
    peak = phases.training.nvidia_smi if in_training else phases.generation.nvidia_smi
    table["framework_overhead"] = peak - sum(table.values())
    notes["framework_overhead"] = components.OVERHEAD_NOTE
    return table, notes


def _backward_rows(table: dict, notes: dict, parts: _Parts, in_training: bool) -> None:
    """At the training peak: mid-backward (activations, logits, casts) or its end (gradients + the fresh one)."""
    if not in_training:
        return
    beside, temporary = parts.beside, parts.temporary.bytes
    at_end = temporary > parts.forward_backward if beside else parts.end_of_backward > parts.forward_backward
    if at_end:
        table["activations"] = table["logits"] = table["autocast_weight_copies"] = 0.0
        table["gradient_temporary"] = temporary / GIB
        if not beside:
            notes["gradients"] = "one micro-step: the full gradients outgrow the activations they replace"
    elif not beside:
        table["gradients"] = 0.0
        notes["gradients"] = "one micro-step: gradients fill in as activations are freed (peak is the activations)"


def _generate_rows(table: dict, notes: dict, settings: RunSettings, phases: _Phases, in_training: bool) -> None:
    """At an HF-generate peak: the KV cache and the rest of what its moment holds (generation.generation_phase)."""
    gen = phases.generate
    if gen is None or in_training:
        return
    moment = gen.peak_moment
    prompt_share = settings.prompt_length / settings.seq_len
    kv = {"prefill": gen.kv_cache * prompt_share, "decode": gen.kv_cache}.get(moment, 0.0)
    table["generation_kv_cache"] = kv / GIB
    table["generation_activations"] = (gen.allocated - kv) / GIB
    widths = "fp32 keys, 16-bit values (autocast over fp32 weights)" if gen.autocast and gen.weight_copies else (
        "keys and values in the compute dtype")
    notes["generation_kv_cache"] = (f"HF generate's DynamicCache, {gen.sequences} sequences x "
                                    f"{settings.prompt_length if moment == 'prefill' else settings.seq_len} tokens, "
                                    f"{widths}")
    notes["generation_activations"] = {
        "prefill": f"the prompt forward over {gen.sequences} x {settings.prompt_length} tokens: one layer's residual "
                   "streams and MLP transients" + (" (LoRA's fp32 adapter path, no autocast in generate)"
                                                   if settings.peft else "")
                   + (", autocast's 16-bit weight copies" if gen.weight_copies else ""),
        "decode": "the last decode step: one layer's repeated K/V for the padded attention and torch.cat's new copy"
                  + (", autocast's 16-bit weight copies" if gen.weight_copies else ""),
        "scoring": f"the no-grad reference/old log-prob forward of {settings.per_device_train_batch_size} sequences",
        "rewarding": f"the reward model's forward over all {gen.sequences} sequences at once",
    }[moment]


def _vllm_rows(table: dict, notes: dict, settings: RunSettings, parts: _Parts, phases: _Phases,
               in_training: bool) -> None:
    """The weight sync's gathered layers and the colocated vLLM's weights and KV cache at the peak phase."""
    vllm, sync = phases.vllm, parts.sync_gather
    at_sync = not in_training and sync.bytes > 0 and (
        vllm is None or phases.vllm_at_sync + sync.bytes > vllm.total)
    if at_sync:
        table["gathered_for_weight_sync"] = sync.bytes / GIB
        notes["gathered_for_weight_sync"] = sync.note
    if vllm is None:
        return
    kind = "NF4 (bitsandbytes, as TRL starts it under QLoRA)" if settings.finetune == "qlora" else "bf16"
    notes["vllm_weights"] = (f"{kind} weights / tensor parallel {settings.vllm_tensor_parallel_size}; its "
                             f"{VLLM_RUNTIME_GIB:g} GiB runtime is in the overhead")
    notes["vllm_kv_cache"] = (f"the rest of vllm_gpu_memory_utilization={settings.vllm_gpu_memory_utilization:g} "
                              "of the GPU, preallocated by vLLM")
    if at_sync and settings.vllm_enable_sleep_mode:
        table["vllm_weights"] = phases.vllm_at_sync / GIB
        notes["vllm_weights"] = "woken for the weight sync; the KV cache still asleep"
    elif not in_training or not settings.vllm_enable_sleep_mode:
        table["vllm_weights"], table["vllm_kv_cache"] = vllm.weights / GIB, max(vllm.kv_cache, 0) / GIB
    else:
        table["vllm_weights"] = VLLM_SLEEP_RESIDUAL_GIB
        notes["vllm_weights"] = "sleeping: weights offloaded and KV cache released while training"
